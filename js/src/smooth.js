// TensorBoard's smoothing: an exponential moving average, debiased so that the first points are
// not pulled towards 0 (tensorboard/webapp/widgets/line_chart_v2/lib/data_transformer.ts).
// Gaps (null) stay gaps and do not reset the average.

export function smooth(ys, weight) {
  if (!(weight > 0)) return ys.slice();
  const out = new Array(ys.length);
  let last = 0, count = 0;
  for (let i = 0; i < ys.length; i++) {
    const y = ys[i];
    if (y === null || y === undefined || !Number.isFinite(y)) { out[i] = y === undefined ? undefined : null; continue; }
    last = last * weight + (1 - weight) * y;
    count += 1;
    out[i] = last / (weight === 1 ? 1 : 1 - Math.pow(weight, count));
  }
  return out;
}

// Align series with different x values into uPlot's table: [xs, ...columns]; a series has no
// value (undefined: the line is drawn through) where another one has a point.
export function align(series) {
  const all = new Set();
  for (const s of series) for (const x of s.xs) all.add(x);
  const xs = Array.from(all).sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const columns = [];
  for (const s of series) {
    for (const col of s.columns) {
      const out = new Array(xs.length).fill(undefined);
      for (let i = 0; i < s.xs.length; i++) out[at.get(s.xs[i])] = col[i];
      columns.push(out);
    }
  }
  return [xs, ...columns];
}
