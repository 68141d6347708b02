// Earlier runs of the cell, drawn faintly under the live curves (mwnotebook/frontend/chart/earlier.py).
// They come once, with the widget's state: `earlier` = [[run number, [[metric, axis, n], ...]], ...]
// (latest run first) and `earlier_data` = one float32 buffer holding, line after line, n x values
// then n y values (NaN: a gap).

// greys, the latest run darkest: never mistaken for a worker's line
const COLOURS = ["#555555", "#7a7a7a", "#9a9a9a", "#b4b4b4"];

export function earlierColour(rank) {
  const c = COLOURS[Math.min(rank, COLOURS.length - 1)];
  return c + "99";  // about 60 % opaque: faint beside the live lines
}

function floats(data) {
  if (!data) return new Float32Array(0);
  if (data instanceof DataView) return new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4);
  if (data instanceof ArrayBuffer) return new Float32Array(data);
  if (ArrayBuffer.isView(data)) return new Float32Array(data.buffer, data.byteOffset, data.byteLength / 4);
  return new Float32Array(0);
}

// -> [{run, label, rank, colour, lines: Map("metric|axis" -> {xs, ys})}], latest first
export function parseEarlier(header, data) {
  const values = floats(data), runs = [];
  let at = 0;
  (header || []).forEach(([run, lines], rank) => {
    const entry = {run, label: `run ${run}`, rank, colour: earlierColour(rank), lines: new Map()};
    for (const [metric, axis, n] of lines) {
      const xs = Array.from(values.subarray(at, at + n));
      const ys = Array.from(values.subarray(at + n, at + 2 * n), (y) => (Number.isFinite(y) ? y : null));
      at += 2 * n;
      entry.lines.set(`${metric}|${axis}`, {xs, ys});
    }
    runs.push(entry);
  });
  return runs;
}
