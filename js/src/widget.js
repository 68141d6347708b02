// The live chart of a %%mwtrain cell: an anywidget module (mwnotebook/frontend/chart/widget.py).
// Everything interactive happens here, in the page: a busy kernel hears nothing from the page until
// its cell ends. The view state is on the root element for tests and curious users:
// `el.querySelector(".mw-live-widget").mwView()` and its data-mw-* attributes.

import uplotCss from "uplot/dist/uPlot.min.css";
import { parseEarlier } from "./earlier.js";
import { Plot } from "./plot.js";
import { Store } from "./store.js";

const CSS = `
.mw-live-widget{font:12px sans-serif;color:#222;background:#fff;padding:4px 0}
.mw-live-widget .mw-bar{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin:2px 0 4px}
.mw-live-widget .mw-title{font-weight:bold;font-size:13px}
.mw-live-widget .mw-legend{display:flex;gap:6px;flex-wrap:wrap;margin:2px 0}
.mw-live-widget .mw-chip{cursor:pointer;border:1px solid #ccc;border-radius:3px;padding:1px 6px;user-select:none}
.mw-live-widget .mw-chip.mw-off{opacity:.35;text-decoration:line-through}
.mw-live-widget .mw-chip i{display:inline-block;width:14px;height:3px;margin:0 4px 3px 0;vertical-align:middle}
.mw-live-widget .mw-readout{min-height:16px;font-family:monospace;white-space:pre-wrap;color:#333}
.mw-live-widget .mw-plots{display:flex;flex-wrap:wrap;gap:8px}
.mw-live-widget .mw-plot-title{font-size:12px;margin-left:8px;color:#333}
.mw-live-widget .mw-notes{color:#a33;margin-top:2px}
.mw-live-widget .mw-legend-row{display:flex;gap:18px;flex-wrap:wrap;align-items:center}
.mw-live-widget .mw-earlier{display:flex;gap:6px;align-items:center;color:#555}
.mw-live-widget .mw-earlier-chip{padding:1px 4px}
.mw-live-widget .mw-earlier-chip.mw-off{opacity:.35;text-decoration:line-through}
.mw-live-widget .mw-earlier-chip i{display:inline-block;width:14px;height:2px;margin:0 4px 3px 0;vertical-align:middle}
`;

let views = 0;

class View {
  constructor(model, store, el) {
    this.model = model;
    this.store = store;
    this.syncKey = `mw-${++views}-`;
    this.hidden = new Set();
    this.log = false;
    this.smoothing = 0;
    this.zooms = new Map();
    this.plots = new Map();
    this.hoverState = null;
    // earlier runs of the cell (earlier.js): shown unless the toggle is off; the picker shows all or one
    this.earlier = parseEarlier(model.get("earlier"), model.get("earlier_data"));
    this.earlierOn = true;
    this.picked = "all";
    this.root = document.createElement("div");
    this.root.className = "mw-live-widget";
    this.root.mwView = () => this.state();
    el.appendChild(this.root);
    const style = document.createElement("style");
    style.textContent = uplotCss + CSS;
    this.root.appendChild(style);
    this.bar = this.element("div", "mw-bar");
    const title = this.element("span", "mw-title", this.bar);
    title.textContent = model.get("title");
    this.logBox = this.control("checkbox", "log scale", () => { this.log = this.logBox.checked; this.rebuild(); });
    this.smoothBox = this.control("range", "smoothing", () => {
      this.smoothing = Number(this.smoothBox.value);
      this.smoothLabel.textContent = this.smoothing.toFixed(2);
      this.rebuild();
    });
    Object.assign(this.smoothBox, {min: "0", max: "0.99", step: "0.01", value: "0"});
    this.smoothLabel = this.element("span", "mw-smooth-value", this.bar);
    this.smoothLabel.textContent = "0.00";
    this.follow = this.element("span", "mw-follow", this.bar);
    const legendRow = this.element("div", "mw-legend-row");
    this.legend = this.element("div", "mw-legend", legendRow);
    if (this.earlier.length) this.earlierControls(legendRow);
    this.readout = this.element("div", "mw-readout");
    this.plotBox = this.element("div", "mw-plots");
    this.notes = this.element("div", "mw-notes");
    this.pending = false;
    this.onData = () => this.schedule();
    store.listeners.add(this.onData);
    this.resizer = new ResizeObserver(() => { for (const p of this.plots.values()) p.resize(); });
    this.resizer.observe(this.root);
    this.draw();
  }

  element(tag, cls, parent) {
    const e = document.createElement(tag);
    e.className = cls;
    (parent || this.root).appendChild(e);
    return e;
  }

  control(type, label, onChange) {
    const wrap = this.element("label", "mw-control", this.bar);
    const input = document.createElement("input");
    input.type = type;
    input.className = "mw-" + label.replace(" ", "-");
    input.addEventListener("input", onChange);
    wrap.appendChild(input);
    wrap.appendChild(document.createTextNode(" " + label));
    return input;
  }

  // The legend's part for earlier runs: a toggle (all of them on or off), a picker (all, or one run)
  // and a swatch per run.
  earlierControls(parent) {
    const box = this.element("div", "mw-earlier", parent);
    const wrap = this.element("label", "mw-control", box);
    this.earlierBox = document.createElement("input");
    this.earlierBox.type = "checkbox";
    this.earlierBox.className = "mw-earlier-toggle";
    this.earlierBox.checked = true;
    this.earlierBox.addEventListener("input", () => { this.earlierOn = this.earlierBox.checked; this.earlierChanged(); });
    wrap.appendChild(this.earlierBox);
    wrap.appendChild(document.createTextNode(" earlier runs"));
    this.picker = this.element("select", "mw-earlier-pick", box);
    const all = document.createElement("option");
    all.value = "all";
    all.textContent = this.earlier.length > 1 ? `all ${this.earlier.length}` : "all";
    this.picker.appendChild(all);
    for (const r of this.earlier) {
      const o = document.createElement("option");
      o.value = String(r.run);
      o.textContent = r.label;
      this.picker.appendChild(o);
    }
    this.picker.addEventListener("change", () => {
      this.picked = this.picker.value === "all" ? "all" : Number(this.picker.value);
      this.earlierChanged();
    });
    this.earlierChips = this.earlier.map((r) => {
      const chip = this.element("span", "mw-earlier-chip", box);
      chip.dataset.run = String(r.run);
      const swatch = document.createElement("i");
      swatch.style.background = r.colour;
      chip.appendChild(swatch);
      chip.appendChild(document.createTextNode(r.label));
      chip.title = "an earlier run of this cell, drawn faintly";
      return chip;
    });
  }

  earlierShown(run) { return this.earlierOn && (this.picked === "all" || this.picked === run); }

  earlierChanged() {
    this.picker.disabled = !this.earlierOn;
    this.earlier.forEach((r, i) => this.earlierChips[i].classList.toggle("mw-off", !this.earlierShown(r.run)));
    for (const p of this.plots.values()) { p.applyVisibility(); p.uplot.redraw(false, false); }
    this.publish();
  }

  get names() { return this.store.names.length ? this.store.names : this.model.get("names"); }

  colour(s) { const c = this.model.get("colours"); return c[s % c.length]; }

  plotWidth() {
    const width = this.root.clientWidth || 720;
    const cols = width >= 980 ? 2 : 1;
    return Math.max(280, Math.floor((width - 8 * (cols - 1)) / cols) - 4);
  }

  zoomed(axis) { return this.zooms.get(axis) || null; }

  zoom(axis, lo, hi) {
    if (!(hi > lo)) return;
    this.zooms.set(axis, [lo, hi]);
    this.draw();
  }

  resetZoom(axis) { this.zooms.delete(axis); this.draw(); }

  toggle(s) {
    if (this.hidden.has(s)) this.hidden.delete(s); else this.hidden.add(s);
    for (const p of this.plots.values()) p.applyVisibility();
    this.drawLegend();
    this.publish();
  }

  showHover(h) {
    this.hoverState = h;
    this.readout.textContent = h
      ? `${h.metric} at ${h.axis} ${Number(h.x.toFixed(3))}:  ` + h.rows.map((r) => `${r.name} ${r.text}`).join("  |  ")
      : "";
    this.root.dataset.mwHover = h ? JSON.stringify(h) : "";
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  rebuild() { for (const p of this.plots.values()) p.build(); this.publish(); }

  draw() {
    for (const id of [...this.store.plots.keys()].sort((a, b) => a - b)) {
      if (!this.plots.has(id)) this.plots.set(id, new Plot(this.plotBox, this.store, id, this));
      else this.plots.get(id).refresh();
    }
    this.drawLegend();
    this.notes.textContent = this.store.nanNote;
    this.follow.textContent = this.zooms.size ? "zoomed (double-click to reset)" : "following the latest step";
    this.publish();
  }

  drawLegend() {
    const names = this.names, key = names.join("|") + [...this.hidden].join(",");
    if (this.legend.dataset.key === key) return;
    this.legend.dataset.key = key;
    this.legend.textContent = "";
    names.forEach((name, s) => {
      const chip = this.element("span", "mw-chip" + (this.hidden.has(s) ? " mw-off" : ""), this.legend);
      chip.dataset.series = String(s);
      const swatch = document.createElement("i");
      swatch.style.background = this.colour(s);
      chip.appendChild(swatch);
      chip.appendChild(document.createTextNode(name));
      chip.title = "click to hide or show";
      chip.addEventListener("click", () => this.toggle(s));
    });
  }

  publish() {
    const d = this.root.dataset;
    d.mwPlots = String(this.plots.size);
    d.mwLog = this.log ? "1" : "0";
    d.mwSmoothing = String(this.smoothing);
    d.mwHidden = [...this.hidden].sort().join(",");
    d.mwZoomed = this.zooms.size ? "1" : "0";
    d.mwSeq = String(this.store.lastSeq);
    d.mwMissed = String(this.store.missed);
    d.mwEarlier = this.earlier.filter((r) => this.earlierShown(r.run)).map((r) => r.run).join(",");
  }

  state() {
    return {plots: [...this.plots.values()].map((p) => p.state()), hidden: [...this.hidden].sort(),
            log: this.log, smoothing: this.smoothing, hover: this.hoverState, names: this.names,
            seq: this.store.lastSeq, missed: this.store.missed, messages: this.store.messages,
            bytes: this.store.bytes, times: this.store.times.slice(), note: this.store.nanNote, epochs: [...this.store.epochs.entries()], restarts: this.store.restarts.slice(),
            earlier: {runs: this.earlier.map((r) => r.run), on: this.earlierOn, picked: this.picked,
                      shown: this.earlier.filter((r) => this.earlierShown(r.run)).map((r) => r.run)}};
  }

  destroy() {
    this.store.listeners.delete(this.onData);
    this.resizer.disconnect();
    for (const p of this.plots.values()) p.uplot.destroy();
  }
}

// initialize() and render() get different proxies of one model: share its store by the chart's id.
const stores = new Map();

function storeOf(model) {
  const id = model.get("chart_id");
  let store = stores.get(id);
  if (!store) { store = new Store(); stores.set(id, store); }
  return store;
}

export default {
  initialize({ model }) {
    const store = storeOf(model);
    model.on("msg:custom", (msg, buffers) => store.handle(msg, buffers));
    return () => stores.delete(model.get("chart_id"));
  },
  render({ model, el }) {
    const view = new View(model, storeOf(model), el);
    return () => view.destroy();
  },
};
