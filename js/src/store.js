// The widget's data, kept on the model (not the view): what the kernel's messages carry.
//
// One message = {seq, key, plots, chunks, epochs, nan, names} + one Float32 buffer. `chunks` is a
// list of [plot, series, n]; the buffer holds, chunk after chunk, n x values then n y values.
// A key frame (`key: true`) carries every point so far and replaces the store (the kernel sends key
// frames for the first seconds of a widget: custom messages that arrive before this module is
// loaded are lost, and the kernel cannot hear back from a page while its cell runs).
// Non-finite y values are gaps (null) and marked; memory is bounded: a series longer than
// 2 * CAP points is halved by merging neighbours (the kernel keeps every point as data).

export const CAP = 1000;

function halve(s) {
  const xs = [], ys = [];
  for (let i = 0; i + 1 < s.xs.length; i += 2) {
    xs.push((s.xs[i] + s.xs[i + 1]) / 2);
    const a = s.ys[i], b = s.ys[i + 1];
    ys.push(a === null || b === null ? null : (a + b) / 2);
  }
  if (s.xs.length % 2) { xs.push(s.xs[s.xs.length - 1]); ys.push(s.ys[s.ys.length - 1]); }
  s.xs = xs; s.ys = ys;
}

export class Store {
  constructor() {
    this.reset();
    this.listeners = new Set();
    this.lastSeq = -1;
    this.missed = 0;   // deltas that came after a lost message (before any key frame)
    this.messages = 0;
    this.times = [];  // when each message arrived (performance.now()), the last 1000
    this.bytes = 0;
  }

  reset() {
    this.plots = new Map();   // id -> {id, metric, axis, note, series: Map(index -> {xs, ys}), nans: []}
    this.epochs = new Map();   // epoch -> step where it starts
    this.restarts = [];        // steps where a resumed attempt went on (--max-restarts)
    this.names = [];
    this.nanNote = "";
  }

  plot(id) { return this.plots.get(id); }

  handle(msg, buffers) {
    this.messages += 1;
    this.times.push(performance.now());
    if (this.times.length > 1000) this.times.shift();
    const buf = buffers && buffers.length ? buffers[0] : null;
    let values = new Float32Array(0);
    if (buf) {
      const view = buf instanceof DataView ? buf : new DataView(buf.buffer || buf);
      values = new Float32Array(view.buffer, view.byteOffset, view.byteLength / 4);
      this.bytes += view.byteLength;
    }
    if (msg.key) this.reset();
    else if (msg.seq !== this.lastSeq + 1) this.missed += 1;
    this.lastSeq = msg.seq;
    for (const [id, metric, axis, note] of msg.plots || []) {
      if (!this.plots.has(id)) this.plots.set(id, {id, metric, axis, note, series: new Map(), nans: []});
    }
    if (msg.names) this.names = msg.names;
    if (msg.note) this.nanNote = msg.note;
    for (const [step, epoch] of msg.epochs || []) this.epochs.set(epoch, step);
    if (msg.restarts) this.restarts = msg.restarts.slice();
    let at = 0;
    for (const [id, index, n] of msg.chunks || []) {
      const plot = this.plots.get(id);
      const xs = values.subarray(at, at + n), ys = values.subarray(at + n, at + 2 * n);
      at += 2 * n;
      if (!plot) continue;
      let s = plot.series.get(index);
      if (!s) { s = {xs: [], ys: []}; plot.series.set(index, s); }
      for (let i = 0; i < n; i++) {
        const y = ys[i];
        s.xs.push(xs[i]);
        if (Number.isFinite(y)) s.ys.push(y);
        else { s.ys.push(null); plot.nans.push([xs[i], index]); }
      }
      if (s.xs.length > 2 * CAP) halve(s);
      if (plot.nans.length > 200) plot.nans = plot.nans.filter((_, i) => i % 2 === 0);
    }
    for (const fn of this.listeners) fn();
  }
}
