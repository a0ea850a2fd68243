// The iterations chart: one stacked bar per iteration by resource category (profiled iterations) or a gray
// bar (outside the aggregation), with black boundaries for a new iter start/stop, zoom (wheel) and pan (drag).

import { chart, COLORS, esc, timeAxis } from "./charts.mjs";
import { ns, exactNs, int } from "./format.mjs";

export function iterationChart(host, series, { interactive = true, onZoom = null } = {}) {
  const c = chart(host);
  const cols = series.columns;
  const idx = Object.fromEntries(cols.map((n, i) => [n, i]));
  const rows = series.rows;
  const iters = rows.map((r) => String(r[idx.iteration]));
  const maxDur = Math.max(1, ...rows.map((r) => r[idx.duration_ns] || 0));
  const axis = timeAxis(maxDur);
  const cats = series.categories.map(([key, label]) => ({
    name: label, type: "bar", stack: "it", key, itemStyle: { color: COLORS[key] }, barMaxWidth: 48,
    data: rows.map((r) => (r[idx.profiled] ? r[idx[key]] : null)),
  }));
  cats.push({ name: "Outside the profile", type: "bar", stack: "it", key: "outside", itemStyle: { color: COLORS.outside },
    data: rows.map((r) => (r[idx.profiled] ? null : r[idx.duration_ns])) });
  let tooltipOn = true;
  const option = {
    animation: false,
    grid: { left: 70, right: 24, top: 36, bottom: interactive ? 86 : 56 },
    legend: { top: 0, type: "scroll", itemWidth: 12, itemHeight: 10, textStyle: { fontSize: 11 } },
    tooltip: { trigger: "axis", axisPointer: { type: "shadow" }, confine: true,
      formatter: (items) => {
        if (!tooltipOn || !items.length) return "";
        const r = rows[items[0].dataIndex];
        const lines = [`<b>Iteration ${esc(r[idx.iteration])}</b>${r[idx.profiled] ? " (profiled)" : " (outside the profile)"}`,
          `Duration: <b>${ns(r[idx.duration_ns])}</b> <span style="color:#888">${exactNs(r[idx.duration_ns])}</span>`,
          `Kernels: ${int(r[idx.kernel_count])} (${int(r[idx.tc_kernel_count])} using TC)`];
        for (const it of items) if (it.value !== null && it.value !== undefined && it.value !== "-")
          lines.push(`${it.marker}${esc(it.seriesName)}: ${ns(it.value)}`);
        return lines.join("<br/>");
      } },
    xAxis: { type: "category", data: iters, name: "Iteration", nameLocation: "middle", nameGap: 28 },
    yAxis: { type: "value", name: `Duration (${axis.unit})`, axisLabel: { formatter: (v) => +(v / axis.scale).toFixed(2) } },
    dataZoom: interactive ? [{ type: "inside", xAxisIndex: 0, zoomOnMouseWheel: true, moveOnMouseMove: true },
      { type: "slider", xAxisIndex: 0, height: 18, bottom: 8 }] : [],
    series: cats,
  };
  c.setOption(option);
  if (onZoom) c.on("datazoom", () => onZoom(zoomFactor()));

  function zoomFactor() {
    const dz = c.getOption().dataZoom;
    if (!dz || !dz.length) return 1;
    const span = (dz[0].end ?? 100) - (dz[0].start ?? 0);
    return span > 0 ? 100 / span : 1;
  }

  return {
    chart: c,
    zoomFactor,
    setBoundaries(start, stop) {
      const data = [];
      if (start !== null && start !== undefined) data.push({ xAxis: String(start), name: "iter start" });
      if (stop !== null && stop !== undefined) data.push({ xAxis: String(stop), name: "iter stop" });
      c.setOption({ series: [{ name: cats[0].name, markLine: { symbol: "none", silent: true,
        lineStyle: { color: "#000", width: 3, type: "solid" }, label: { formatter: (p) => p.name, color: "#000" }, data } }] });
    },
    showRange(first, last) {
      const a = iters.indexOf(String(first)), b = iters.indexOf(String(last));
      if (a < 0 || b < 0) return;
      c.dispatchAction({ type: "dataZoom", startValue: Math.max(0, a), endValue: b });
    },
    resetZoom() { c.dispatchAction({ type: "dataZoom", start: 0, end: 100 }); },
    toggleTooltip() { tooltipOn = !tooltipOn; c.dispatchAction({ type: "hideTip" }); return tooltipOn; },
  };
}
