// Bundles the live chart widget (src/widget.js + uPlot from npm) into one ES module that
// anywidget loads: mwnotebook/frontend/chart/static/live_chart.js (git-ignored, in the wheel).
import { build } from "esbuild";

await build({
  entryPoints: ["src/widget.js"],
  outfile: "../mwnotebook/frontend/chart/static/live_chart.js",
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  loader: { ".css": "text" },
  // uPlot is MIT-licensed: its notice travels with the bundle
  banner: { js: "/*! uPlot 1.6.32 (c) Leon Sorokin, MIT License, https://github.com/leeoniya/uPlot */" },
  logLevel: "info",
});
