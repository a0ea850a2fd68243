// Apache ECharts helpers: DLProf's colours, donuts with exact values on hover, and time axes in readable units.

import * as echarts from "/static/vendor/echarts.esm.min.mjs";
import { ns, exactNs, pct, nsUnit, el } from "./format.mjs";

export { echarts };

export const COLORS = {
  tensor_core_ns: "#2e7d32", non_tensor_core_ns: "#8bc34a", memory_ns: "#1e88e5", cpu_ns: "#e65100",
  io_ns: "#fb8c00", dataloader_ns: "#ffcc80", other_ns: "#f48fb1", outside: "#bdbdbd", busy: "#76b900", idle: "#cfd8dc",
};

const charts = new Set();
window.addEventListener("resize", () => charts.forEach((c) => c.resize()));
// A chart follows its box, not only the window: opening the Details pane or a narrower grid column resizes it.
const resizer = typeof ResizeObserver === "undefined" ? null
  : new ResizeObserver((entries) => entries.forEach((e) => { if (e.target.chart) e.target.chart.resize(); }));

export function chart(host) {
  const c = echarts.init(host, null, { renderer: "canvas" });
  charts.add(c);
  host.chart = c;  // tests and the console read what is drawn from here
  if (resizer) resizer.observe(host);
  return c;
}

/** A donut of [label, value, colour] slices; ``fmt`` renders a value (exact on hover via tooltip). With nothing to
 * draw (no slice above zero) it says ``empty`` instead of drawing equal slices of nothing. */
export function donut(host, slices, { fmt = ns, exact = exactNs, center = "", empty = "Nothing was measured." } = {}) {
  const total = slices.reduce((a, s) => a + (s[1] || 0), 0);
  if (!(total > 0)) {
    host.replaceWith(el("p", { class: "na chart-empty", "data-testid": "chart-empty", text: empty }));
    return null;
  }
  const c = chart(host);
  c.setOption({
    animation: false,
    tooltip: { trigger: "item", formatter: (p) => `${esc(p.name)}<br/><b>${fmt(p.value)}</b> (${p.percent.toFixed(1)} %)<br/><span style="color:#888">${exact(p.value)}</span>` },
    legend: { bottom: 0, type: "plain", itemWidth: 10, itemHeight: 10, itemGap: 8, textStyle: { fontSize: 11 } },
    title: center ? { text: center, left: "center", top: "34%", textStyle: { fontSize: 18, fontWeight: 600, color: "#222" } } : undefined,
    series: [{ type: "pie", radius: ["42%", "64%"], center: ["50%", "40%"], avoidLabelOverlap: true, label: { show: false },
      data: slices.filter((s) => s[1] !== null && s[1] !== undefined).map(([name, value, color]) => ({ name, value, itemStyle: { color } })) }],
  });
  c.total = total;
  return c;
}

export function esc(s) {
  return String(s).replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[ch]));
}

export function timeAxis(maxNs) {
  const [scale, unit] = nsUnit(maxNs || 1);
  return { scale, unit, fmt: (v) => `${+(v / scale).toFixed(2)} ${unit}` };
}

export { pct, ns, exactNs };
