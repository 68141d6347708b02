// One plot = one metric = one uPlot chart: a faint raw line and a main (smoothed) line per series
// (series 0..N-1 are the workers, N the global value), epoch marks, gaps marked where values were
// NaN/inf. Zoom, hidden workers, log scale and smoothing come from the shared view state.
// After them, one faint line per earlier run of the cell that had this metric (earlier.js), drawn
// under the live ones and labelled with its run number where it ends.

import uPlot from "uplot";
import { align, smooth } from "./smooth.js";

const HEIGHT = 230;

function fade(colour) {
  return colour.length === 7 ? colour + "40" : colour;
}

function fmt(v) {
  if (v === null) return "gap (NaN/inf)";
  if (v === undefined) return "-";
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(3) : v.toPrecision(4);
}

export class Plot {
  constructor(parent, store, id, view) {
    this.store = store;
    this.id = id;
    this.view = view;
    this.data = null;
    this.box = document.createElement("div");
    this.box.className = "mw-plot";
    const info = store.plot(id);
    this.box.dataset.metric = info.metric;
    this.box.dataset.axis = info.axis;
    this.title = document.createElement("div");
    this.title.className = "mw-plot-title";
    this.title.textContent = info.metric + (info.note ? " \u2014 " + info.note : "");
    this.box.appendChild(this.title);
    this.chartBox = document.createElement("div");
    this.box.appendChild(this.chartBox);
    parent.appendChild(this.box);
    this.build();
  }

  get info() { return this.store.plot(this.id); }

  seriesCount() { return this.view.names.length; }

  // the earlier runs that have this plot's metric: [{run, label, colour, line: {xs, ys}}]
  earlierLines() {
    const key = `${this.info.metric}|${this.info.axis}`;
    return this.view.earlier.filter((r) => r.lines.has(key)).map((r) => ({...r, line: r.lines.get(key)}));
  }

  build() {
    if (this.uplot) this.uplot.destroy();
    const n = this.seriesCount();
    this.earlierList = this.earlierLines();
    const series = [{label: this.info.axis}];
    for (let s = 0; s < n; s++) {
      const colour = this.view.colour(s), dash = s === n - 1 ? [5, 3] : undefined;
      const shown = !this.view.hidden.has(s);
      series.push({label: this.view.names[s] + " (raw)", stroke: fade(colour), width: 1, dash,
                   show: shown && this.view.smoothing > 0, points: {show: false}});
      // epoch plots have a point per epoch: draw the points (a single one is no line)
      series.push({label: this.view.names[s], stroke: colour, width: s === n - 1 ? 2 : 1.5, dash,
                   show: shown, points: {show: this.info.axis === "epoch", size: 6, fill: colour}});
    }
    for (const e of this.earlierList) {
      series.push({label: e.label, stroke: e.colour, width: 1.25, show: this.view.earlierShown(e.run),
                   points: {show: this.info.axis === "epoch", size: 4, fill: e.colour}});
    }
    const self = this;
    const opts = {
      width: this.view.plotWidth(), height: HEIGHT, series, legend: {show: false},
      scales: {x: {time: false}, y: this.view.log ? {distr: 3} : {}},
      axes: [{label: this.info.axis === "epoch" ? "epoch" : "step", size: 40},
             {label: this.info.metric, size: 60}],
      cursor: {drag: {x: true, y: false, setScale: false}, points: {show: false},
               sync: {key: this.view.syncKey + this.info.axis}},
      hooks: {
        setSelect: [(u) => {
          if (u.select.width < 4) return;
          const lo = u.posToVal(u.select.left, "x"), hi = u.posToVal(u.select.left + u.select.width, "x");
          u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
          self.view.zoom(self.info.axis, lo, hi);
        }],
        setCursor: [(u) => self.hover(u)],
        draw: [(u) => self.marks(u)],
      },
    };
    this.uplot = new uPlot(opts, this.table(), this.chartBox);
    this.uplot.over.addEventListener("dblclick", () => this.view.resetZoom(this.info.axis));
    this.uplot.over.addEventListener("mouseenter", () => { this.view.active = this; });
    this.uplot.over.addEventListener("mouseleave", () => { this.view.active = null; this.view.showHover(null); });
    this.applyZoom();
  }

  table() {
    const n = this.seriesCount(), parts = [];
    for (let s = 0; s < n; s++) {
      const src = this.info.series.get(s) || {xs: [], ys: []};
      let ys = src.ys;
      if (this.view.log) ys = ys.map((y) => (y !== null && y <= 0 ? undefined : y));
      parts.push({xs: src.xs, columns: [ys, smooth(ys, this.view.smoothing)]});
    }
    for (const e of this.earlierList || []) {
      let ys = e.line.ys;
      if (this.view.log) ys = ys.map((y) => (y !== null && y <= 0 ? undefined : y));
      parts.push({xs: e.line.xs, columns: [smooth(ys, this.view.smoothing)]});
    }
    this.data = align(parts);
    return this.data;
  }

  refresh() {
    if (this.seriesCount() * 2 + 1 + this.earlierList.length !== this.uplot.series.length) { this.build(); return; }
    this.uplot.setData(this.table(), !this.view.zoomed(this.info.axis));
    this.applyZoom();
  }

  applyZoom() {
    const range = this.view.zoomed(this.info.axis);
    if (range) this.uplot.setScale("x", {min: range[0], max: range[1]});
  }

  applyVisibility() {
    const n = this.seriesCount();
    for (let s = 0; s < n; s++) {
      const shown = !this.view.hidden.has(s);
      this.uplot.setSeries(1 + 2 * s, {show: shown && this.view.smoothing > 0});
      this.uplot.setSeries(2 + 2 * s, {show: shown});
    }
    this.earlierList.forEach((e, k) => this.uplot.setSeries(1 + 2 * n + k, {show: this.view.earlierShown(e.run)}));
  }

  resize() { this.uplot.setSize({width: this.view.plotWidth(), height: HEIGHT}); }

  // Every shown series' value at the cursor: the main line's value at that x, else the last
  // point before it (workers' points need not share x values).
  hover(u) {
    const idx = u.cursor.idx;
    if (this.view.active !== this) return;  // a plot that only follows the synced cursor
    if (idx === null || idx === undefined || !this.data) return;
    const x = this.data[0][idx], rows = [];
    for (let s = 0; s < this.seriesCount(); s++) {
      if (this.view.hidden.has(s)) continue;
      const col = this.data[2 + 2 * s];
      let i = idx;
      while (i >= 0 && col[i] === undefined) i--;
      rows.push({series: s, name: this.view.names[s], value: i >= 0 ? col[i] : undefined});
    }
    const n = this.seriesCount();
    this.earlierList.forEach((e, k) => {
      if (!this.view.earlierShown(e.run)) return;
      const col = this.data[1 + 2 * n + k];
      let i = idx;
      while (i >= 0 && col[i] === undefined) i--;
      rows.push({series: `run ${e.run}`, name: e.label, value: i >= 0 ? col[i] : undefined});
    });
    this.view.showHover({metric: this.info.metric, axis: this.info.axis, x, rows: rows.map(
      (r) => ({...r, text: fmt(r.value)}))});
  }

  marks(u) {
    const ctx = u.ctx, top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
    const {min, max} = u.scales.x;
    ctx.save();
    ctx.font = `${Math.round(10 * devicePixelRatio)}px sans-serif`;
    if (this.info.axis === "step") {
      ctx.strokeStyle = "#999";
      ctx.fillStyle = "#666";
      ctx.setLineDash([3 * devicePixelRatio, 3 * devicePixelRatio]);
      for (const [epoch, step] of this.store.epochs) {
        if (step < min || step > max || epoch === 0) continue;
        const px = u.valToPos(step, "x", true);
        ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke();
        ctx.fillText(`epoch ${epoch + 1}`, px + 3, top + 11 * devicePixelRatio);
      }
      ctx.strokeStyle = "#ff7f0e";
      ctx.fillStyle = "#ff7f0e";
      this.store.restarts.forEach((step, i) => {
        if (step < min || step > max) return;
        const px = u.valToPos(step, "x", true);
        ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, bottom); ctx.stroke();
        ctx.fillText(`restart ${i + 1}`, px + 3, top + 23 * devicePixelRatio);
      });
    }
    ctx.setLineDash([]);
    this.earlierLabels(u, ctx);
    ctx.fillStyle = "#d62728";
    const size = 5 * devicePixelRatio;
    for (const [x, s] of this.info.nans) {
      if (x < min || x > max || this.view.hidden.has(s)) continue;
      const px = u.valToPos(x, "x", true);
      ctx.beginPath(); ctx.moveTo(px, bottom - 2 * size); ctx.lineTo(px - size, bottom); ctx.lineTo(px + size, bottom);
      ctx.closePath(); ctx.fill();
    }
    ctx.restore();
  }

  // Each shown earlier run's label at the last point of its line inside the view.
  earlierLabels(u, ctx) {
    const n = this.seriesCount(), {min, max} = u.scales.x, xs = u.data[0];
    this.labelsDrawn = [];
    const used = [];
    ctx.textAlign = "right";
    this.earlierList.forEach((e, k) => {
      if (!u.series[1 + 2 * n + k].show) return;
      const col = u.data[1 + 2 * n + k];
      let i = col.length - 1;
      while (i >= 0 && (col[i] === undefined || col[i] === null || xs[i] > max)) i--;
      if (i < 0 || xs[i] < min) return;
      const px = u.valToPos(xs[i], "x", true), gap = 11 * devicePixelRatio;
      let py = u.valToPos(col[i], "y", true) - 4 * devicePixelRatio;
      while (used.some((y) => Math.abs(y - py) < gap)) py += gap;  // lines that end close: labels apart
      used.push(py);
      ctx.fillStyle = e.colour.slice(0, 7);
      ctx.fillText(e.label, px - 3 * devicePixelRatio, py);
      this.labelsDrawn.push({label: e.label, x: xs[i], y: col[i]});
    });
    ctx.textAlign = "left";
  }

  state() {
    const x = this.uplot.scales.x, y = this.uplot.scales.y;
    const points = [];
    for (let s = 0; s < this.seriesCount(); s++) points.push((this.info.series.get(s) || {xs: []}).xs.length);
    // the last value of each line as given to uPlot (what is drawn), main and raw
    const lastOf = (c) => {
      const col = this.uplot.data[c] || [];
      let i = col.length - 1;
      while (i >= 0 && (col[i] === undefined || col[i] === null)) i--;
      return i >= 0 ? col[i] : null;
    };
    const last = [], lastRaw = [];
    for (let s = 0; s < this.seriesCount(); s++) { last.push(lastOf(2 + 2 * s)); lastRaw.push(lastOf(1 + 2 * s)); }
    return {metric: this.info.metric, axis: this.info.axis, note: this.info.note, xMin: x.min, xMax: x.max,
            yMin: y.min, yMax: y.max, log: this.view.log, zoomed: !!this.view.zoomed(this.info.axis),
            distr: y.distr, points, lastDrawn: last, lastRaw, nans: this.info.nans.length,
            shown: this.uplot.series.slice(1).map((s) => s.show),
            earlier: this.earlierList.map((e, k) => ({run: e.run, label: e.label, points: e.line.xs.length,
                                                      shown: this.uplot.series[1 + 2 * this.seriesCount() + k].show,
                                                      drawn: lastOf(1 + 2 * this.seriesCount() + k)})),
            labels: (this.labelsDrawn || []).map((l) => l.label)};
  }
}
