// The Roofline view: a log-log chart (one roof per precision, one sloped roof per memory level, ops sized by
// GPU time, ncu kernels per memory level), the summary, and the ops / kernels tables. Names reach the chart's
// tooltip through esc() and the page through textContent only.

import { el, ns, nsSpan, int, num, NA } from "./format.mjs";
import { chart, esc } from "./charts.mjs";
import { dataTable } from "./table.mjs";
import { pageScope, viewUrl } from "./state.mjs";

const LEVELS = { l1: ["L1", "#2e7d32"], l2: ["L2", "#ef6c00"], dram: ["DRAM", "#c62828"] };
const BOUND = { memory: ["Memory-bound ops", "#1e88e5"], math: ["Math-bound ops", "#8e24aa"], none: ["Ops (no roofs: GPU unknown)", "#78909c"] };
const KERNEL_SYMBOL = { l1: "triangle", l2: "diamond", dram: "rect" };

/** What a vendor calls its matrix units: AMD's Matrix Cores are NVIDIA's Tensor Cores (gpu_specs.json). */
export function matrixUnit(vendor) {
  return vendor === "AMD" ? "Matrix Core" : "Tensor";
}

/** "bf16_tensor" -> "BF16 Tensor" ("BF16 Matrix Core" on an AMD GPU). */
export function precisionLabel(key, vendor) {
  return String(key).split("_").map((w) => (w === "tensor" ? matrixUnit(vendor) : w.toUpperCase())).join(" ");
}

/** FLOP/s in readable units: "989.4 TFLOP/s". */
export function flops(v) {
  if (v === null || v === undefined) return NA;
  for (const [scale, unit] of [[1e15, "PFLOP/s"], [1e12, "TFLOP/s"], [1e9, "GFLOP/s"], [1e6, "MFLOP/s"]]) {
    if (Math.abs(v) >= scale) return `${num(v / scale, v / scale >= 100 ? 1 : 2)} ${unit}`;
  }
  return `${num(v, 0)} FLOP/s`;
}

function bandwidth(v) {
  return v >= 1e12 ? `${num(v / 1e12, 2)} TB/s` : `${num(v / 1e9, 1)} GB/s`;
}

function pctText(v) {
  return v === null || v === undefined ? NA : `${v.toFixed(1)} %`;
}

/** Roofs with the same peak drawn once: [{keys, label, value}] (FP16 and BF16 Tensor share a line). */
export function mergedRoofs(flopsPerS, vendor) {
  const unit = matrixUnit(vendor);
  const byValue = new Map();
  for (const [k, v] of Object.entries(flopsPerS || {})) if (v) {
    if (!byValue.has(v)) byValue.set(v, []);
    byValue.get(v).push(k);
  }
  return [...byValue.entries()].sort((a, b) => b[0] - a[0]).map(([value, keys]) => ({
    keys, value, label: keys.map((k) => precisionLabel(k, vendor)).join(" / ").replace(new RegExp(` ${unit} / (\\w+) ${unit}`, "g"), ` / $1 ${unit}`),
  }));
}

function decade(v, up) {
  return 10 ** (up ? Math.ceil(Math.log10(v)) : Math.floor(Math.log10(v)));
}

function axisRange(points, roofs, bws) {
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const top = roofs.length ? roofs[0].value : null;
  for (const r of roofs) for (const b of bws) xs.push(r.value / b);
  for (const r of roofs) ys.push(r.value);
  if (!xs.length) return [1e-2, 1e4, 1e9, 1e15];
  const xmin = decade(Math.min(...xs) / 3), xmax = decade(Math.max(...xs) * 3, true);
  const ymin = decade(Math.min(...ys) / 3), ymax = decade((top || Math.max(...ys)) * 2, true);
  return [xmin, xmax, ymin, ymax];
}

function kv(rows) {
  return el("table", { class: "kv" }, el("tbody", {}, rows.map(([k, v, testid]) =>
    el("tr", { "data-testid": testid || null }, el("th", {}, el("span", { class: "label", text: k })),
      el("td", {}, v instanceof Node ? v : v === null || v === undefined ? el("span", { class: "na", text: NA }) : String(v))))));
}

function shareOf(v, whole) {
  if (v === null || v === undefined) return null;
  return el("span", { title: `${int(v)} ns`, text: `${ns(v)}${whole ? ` (${((100 * v) / whole).toFixed(1)} %)` : ""}` });
}

function summaryPanel(r) {
  const s = r.summary, c = r.ceilings, g = r.gpu;
  const gpuName = g && g.name ? g.name : g && g.cc ? `compute capability ${g.cc}` : null;
  // the cell names the roofs; how they were matched (a sentence or two) goes below the table
  const roofsFrom = c ? el("span", { title: c.note || `matched by ${c.matched_by}`, text: c.name }) : null;
  const modelled = s.modelled_gpu_time_ns;
  return el("section", { class: "panel p-roof-summary", "data-testid": "roofline-summary" },
    el("div", { class: "panel-head" }, el("h2", { text: "Summary" })),
    kv([["GPU", gpuName, "gpu"], ["Roofs from", roofsFrom, "roofs-from"],
      ["DRAM bandwidth", c && c.bytes_per_s.dram ? bandwidth(c.bytes_per_s.dram) : null],
      // cache roofs are published measurements: the cell's title says which file and how (gpu_specs.json)
      ...["l2", "l1"].filter((l) => c && c.bytes_per_s[l]).map((l) => [`${l.toUpperCase()} bandwidth`,
        el("span", { title: (c.sources || {})[l] || "", text: bandwidth(c.bytes_per_s[l]) }), `${l}-bandwidth`]),
      ["Memory-bound GPU time", shareOf(s.memory_bound_gpu_time_ns, modelled), "memory-bound"],
      ["Math-bound GPU time", shareOf(s.math_bound_gpu_time_ns, modelled), "math-bound"],
      ["Op GPU time on the chart", shareOf(modelled, s.op_gpu_time_ns), "modelled"],
      ["Op GPU time without a FLOP model", shareOf(s.unmodelled_gpu_time_ns, s.op_gpu_time_ns)],
      ["Ops on the chart", int(s.modelled_op_nodes), "op-count"],
      ["Kernels with counters (Nsight Compute)", int(r.kernels.length), "kernel-count"],
      ["Ops above their roof", int(s.above_roof_op_nodes || 0), "above-count"]]),
    c && c.note ? el("p", { class: "hint roofs-note", "data-testid": "roofs-note", text: `Roofs: ${c.note}` }) : null,
    el("p", { class: "hint", text: "Bound: an op at or above the ridge point (peak FLOP/s of its precision ÷ DRAM bandwidth) is math bound, below it memory bound. % of roof = achieved ÷ the roof at its intensity." }));
}

function furthestPanel(r) {
  const rows = r.summary.furthest_below || [];
  const body = rows.length ? el("table", { class: "grid furthest" },
    el("thead", {}, el("tr", {}, ["Op", "Bound", "Precision", "% of Roof", "GPU Time", "Est. Saving"].map((h) => el("th", { text: h })))),
    el("tbody", {}, rows.map((o) => el("tr", {},
      el("td", {}, el("a", { href: viewUrl("ops-kernels", { node: o.node_id }), title: o.op_name, text: o.op_name })),
      el("td", {}, el("span", { class: `tag bound-${o.bound}`, text: o.bound })), el("td", { text: o.precision || "" }),
      el("td", { class: "num", text: pctText(o.pct_of_ceiling) }), el("td", { class: "num" }, nsSpan(o.gpu_time_ns)),
      el("td", { class: "num" }, nsSpan(o.est_saving_ns))))))
    : el("p", { class: "na", text: r.ceilings ? "No op could be placed under a roof." : "Needs the GPU's roofs (see above)." });
  return el("section", { class: "panel p-furthest" }, el("div", { class: "panel-head" }, el("h2", { text: "Furthest Below Their Roof" }),
    el("p", { class: "hint", text: "Ops whose GPU time would shrink most if they reached their roof." })), body);
}

function drawChart(box, r) {
  const c = r.ceilings;
  const roofs = c ? mergedRoofs(c.flops_per_s, c.vendor) : [];
  const vendor = c ? c.vendor : null;
  const bws = c ? Object.entries(c.bytes_per_s || {}).filter(([, v]) => v) : [];
  const used = new Set(r.ops.map((o) => o.ceiling).filter(Boolean));
  const opPts = r.ops.filter((o) => o.arithmetic_intensity > 0 && o.achieved_flops_per_s > 0);
  const kPts = [];
  for (const k of r.kernels) for (const lvl of Object.keys(LEVELS)) {
    if (k[`ai_${lvl}`] > 0 && k.achieved_flops_per_s > 0) kPts.push([lvl, k]);
  }
  const pts = [...opPts.map((o) => [o.arithmetic_intensity, o.achieved_flops_per_s]), ...kPts.map(([l, k]) => [k[`ai_${l}`], k.achieved_flops_per_s])];
  const [xmin, xmax, ymin, ymax] = axisRange(pts, roofs, bws.map(([, v]) => v));
  const top = roofs.length ? roofs[0].value : ymax;
  const widest = bws.length ? Math.max(...bws.map(([, v]) => v)) : null;
  const series = [];
  for (const [lvl, bw] of bws) {
    const [label, color] = LEVELS[lvl] || [lvl, "#555"];
    const x0 = Math.max(xmin, ymin / bw);
    const xMid = Math.sqrt(x0 * (top / bw));
    series.push({ name: `${label} roof`, type: "line", roof: `${label} bandwidth ${bandwidth(bw)}`, symbol: "circle", symbolSize: 0,
      lineStyle: { color, width: 2 }, itemStyle: { color }, z: 2,
      data: [[x0, x0 * bw], { value: [xMid, xMid * bw], label: { show: true, formatter: `${label} ${bandwidth(bw)}`, position: "left", color, fontSize: 11, fontWeight: 600, offset: [-2, -10] } }, [top / bw, top]] });
  }
  for (const roof of roofs) {
    const isUsed = roof.keys.some((k) => used.has(k));
    const color = isUsed ? "#263238" : "#9aa5ad";
    const x0 = widest ? roof.value / widest : xmin;
    series.push({ name: "Compute roofs", type: "line", roof: `${roof.label} peak ${flops(roof.value)}`, symbol: "circle", symbolSize: 0, z: 2,
      lineStyle: { color, width: isUsed ? 2 : 1, type: isUsed ? "solid" : "dashed" }, itemStyle: { color: "#263238" },
      data: [[x0, roof.value], { value: [xmax, roof.value], label: { show: true, formatter: `${roof.label} ${flops(roof.value)}`, position: "top", color: isUsed ? "#263238" : "#7b8790", fontSize: 11, fontWeight: isUsed ? 600 : 400, align: "right", offset: [-4, 2] } }] });
  }
  const tmax = Math.max(1, ...opPts.map((o) => o.gpu_time_ns || 0), ...kPts.map(([, k]) => k.time_ns || 0));
  const size = (t) => 7 + 30 * Math.sqrt((t || 0) / tmax);
  for (const [bound, [name, color]] of Object.entries(BOUND)) {
    const data = opPts.filter((o) => (o.bound || "none") === bound).map((o) => ({ value: [o.arithmetic_intensity, o.achieved_flops_per_s], op: o, symbolSize: size(o.gpu_time_ns) }));
    if (data.length) series.push({ name, type: "scatter", data, z: 5, itemStyle: { color, opacity: 0.75, borderColor: "#fff", borderWidth: 1 }, emphasis: { focus: "self", itemStyle: { opacity: 1 } } });
  }
  const above = opPts.filter((o) => o.above_roof);
  if (above.length) series.push({ name: "Above their roof (see the note)", type: "scatter", symbol: "circle", z: 7,
    data: above.map((o) => ({ value: [o.arithmetic_intensity, o.achieved_flops_per_s], op: o, symbolSize: size(o.gpu_time_ns) + 4 })),
    itemStyle: { color: "rgba(0,0,0,0)", borderColor: "#d32f2f", borderWidth: 2 } });
  for (const lvl of Object.keys(LEVELS)) {
    const data = kPts.filter(([l]) => l === lvl).map(([l, k]) => ({ value: [k[`ai_${l}`], k.achieved_flops_per_s], kernel: k, level: l, symbolSize: size(k.time_ns) }));
    if (data.length) series.push({ name: `Kernels at ${LEVELS[lvl][0]} intensity`, type: "scatter", symbol: KERNEL_SYMBOL[lvl], data, z: 6,
      itemStyle: { color: LEVELS[lvl][1], opacity: 0.7, borderColor: "#fff", borderWidth: 1 } });
  }
  const tooltip = (p) => {
    const d = p.data || {};
    if (d.op) {
      const o = d.op;
      return [`<b>${esc(o.op_name)}</b>`, `<span style="color:#888">${esc(o.op_type || "")} · ${esc(o.precision || "?")}${o.tensor_cores ? ` · ${matrixUnit(vendor)}s` : ""} · ${int(o.calls)} calls</span>`,
        `Arithmetic intensity: <b>${num(o.arithmetic_intensity, 2)}</b> FLOP/B`, `Achieved: <b>${flops(o.achieved_flops_per_s)}</b>`,
        `GPU time: <b>${ns(o.gpu_time_ns)}</b> <span style="color:#888">${int(o.gpu_time_ns)} ns</span>`,
        o.bound ? `${esc(o.bound)} bound · <b>${pctText(o.pct_of_ceiling)}</b> of its roof (${esc(precisionLabel(o.ceiling || "", vendor))})` : "no roof: GPU unknown",
        o.above_roof ? `<span style="color:#d32f2f">Above its roof: ${esc(o.above_roof_reason || "")}</span>` : ""].filter(Boolean).join("<br/>");
    }
    if (d.kernel) {
      const k = d.kernel;
      return [`<b>${esc(k.kernel_name)}</b>`, `<span style="color:#888">Nsight Compute kernel · ${esc(k.precision || "?")}</span>`,
        `${LEVELS[d.level][0]} intensity: <b>${num(k[`ai_${d.level}`], 2)}</b> FLOP/B`, `Achieved: <b>${flops(k.achieved_flops_per_s)}</b>`,
        `GPU time: <b>${ns(k.time_ns)}</b>`, k.limiting_level ? `limited by ${esc(k.limiting_level)} · <b>${pctText(k.pct_of_ceiling)}</b> of its roof` : ""].join("<br/>");
    }
    return esc(series[p.seriesIndex].roof || p.seriesName);
  };
  const ch = chart(box);
  const logAxis = (name, min, max, fmt, gap) => ({ type: "log", logBase: 10, name, nameLocation: "middle", nameGap: gap, min, max,
    axisLabel: { formatter: fmt, fontSize: 11 }, splitLine: { lineStyle: { color: "#eef1f4" } }, minorSplitLine: { show: false } });
  ch.setOption({
    animation: false,
    grid: { left: 78, right: 28, top: 44, bottom: 56 },
    legend: { top: 0, type: "scroll", itemWidth: 14, itemHeight: 10, textStyle: { fontSize: 11 } },
    tooltip: { trigger: "item", confine: true, formatter: tooltip },
    toolbox: { right: 6, top: 18, itemSize: 13, feature: { dataZoom: { title: { zoom: "Zoom", back: "Undo zoom" } }, restore: { title: "Reset" }, saveAsImage: { title: "Save PNG", name: "roofline" } } },
    xAxis: logAxis("Arithmetic intensity (FLOP/byte)", xmin, xmax, (v) => (v >= 1 ? num(v, 0) : String(+v.toPrecision(1))), 30),
    yAxis: logAxis("Achieved performance (FLOP/s)", ymin, ymax, (v) => flops(v).replace("FLOP/s", "").trim(), 62),
    series,
  });
  ch.on("click", (p) => { if (p.data && p.data.op) location.href = viewUrl("ops-kernels", { node: p.data.op.node_id }); });
  box.chart = ch;  // for tests and the console, like a table section's .table
  box.dataset.roofs = JSON.stringify(series.filter((x) => x.roof).map((x) => x.roof));
  box.dataset.points = String(opPts.length + kPts.length);
  return ch;
}

export function renderRoofline(content, data) {
  const r = data.roofline;
  const gpu = r.gpu && r.gpu.name ? r.gpu.name : "an unknown GPU";
  content.append(el("div", { class: "view-head" }, el("h1", { text: "Roofline" }),
    el("p", { class: "hint", text: `Where each op sits under the roofs of ${gpu}: achieved FLOP/s against arithmetic intensity (FLOPs from the op's input shapes, time from its own kernels). Dots are sized by GPU time; click one to open its kernels. Drag with the zoom tool to look closer.` })));
  if (r.ceilings_error) {
    content.append(el("section", { class: "panel warning", role: "note", "data-testid": "ceilings-error" },
      el("h2", { text: "Roofs not drawn: this GPU's peaks are unknown" }), el("p", { class: "error-message", text: r.ceilings_error }),
      r.ceilings_hint ? el("p", { class: "hint", text: r.ceilings_hint }) : null));
  }
  const box = el("div", { class: "chart roofline-chart", "data-testid": "roofline-chart" });
  const hasPoints = r.ops.some((o) => o.arithmetic_intensity > 0 && o.achieved_flops_per_s > 0) || r.kernels.some((k) => k.achieved_flops_per_s > 0);
  const chartPanel = el("section", { class: "panel p-roof-chart" }, el("div", { class: "panel-head" }, el("h2", { text: "Roofline Chart" }),
    el("p", { class: "hint", text: r.ceilings ? `${r.ceilings.name}: dark roofs are the precisions these ops use` : "ops placed without roofs" })), box);
  const off = r.ops.filter((o) => !(o.arithmetic_intensity > 0 && o.achieved_flops_per_s > 0));
  const above = r.ops.filter((o) => o.above_roof);
  if (above.length) {
    const reasons = [...new Set(above.map((o) => o.above_roof_reason))];
    chartPanel.append(el("div", { class: "above-roof", role: "note", "data-testid": "above-roof" },
      el("b", { text: `${above.length} op${above.length > 1 ? "s" : ""} above ${above.length > 1 ? "their" : "its"} roof (red rings, up to ${Math.max(...above.map((o) => o.pct_of_ceiling)).toFixed(0)} %): ` }),
      reasons.join(" Or: ")));
  }
  if (off.length) chartPanel.append(el("p", { class: "hint", "data-testid": "off-chart", text: `${off.length} op${off.length > 1 ? "s" : ""} without FLOPs (pure data movement, e.g. ${off[0].op_name}) cannot sit on a log scale: see the table.` }));
  if (!hasPoints) {
    chartPanel.append(el("p", { class: "na", "data-testid": "roofline-empty", text: r.summary.op_gpu_time_ns
      ? "None of the ops that ran on the GPU has a FLOP model (their shapes were not recorded or the op is not modelled)."
      : "No op ran on the GPU in this aggregation, so there is nothing to place under the roofs." }));
  }
  content.append(el("div", { class: "roofline-grid" }, chartPanel, el("div", { class: "roofline-side" }, summaryPanel(r))));
  content.append(furthestPanel(r));
  dataTable(content, { table: "roofline_ops", prefix: "ops", title: "Ops on the Roofline", hint: "One row per op node with a FLOP model. Click a row to open its kernels.",
    scope: () => pageScope({ node: null, iteration: null }), rowKey: "node_id",
    onRowClick: (row) => { location.href = viewUrl("ops-kernels", { node: row.node_id }); },
    format: { bound: (v) => (v ? el("span", { class: `tag bound-${v}`, text: v }) : el("span", { class: "na", text: NA })),
      ceiling: (v) => el("span", { text: v ? precisionLabel(v, r.ceilings && r.ceilings.vendor) : NA, class: v ? "" : "na" }) } });
  if (r.kernels.length) dataTable(content, { table: "roofline_kernels", prefix: "kernels", title: "Kernels on the Roofline (Nsight Compute)",
    hint: "Measured FLOPs and bytes per memory level (hierarchical roofline).", scope: () => pageScope({ node: null, iteration: null }), rowKey: "row" });
  requestAnimationFrame(() => {
    if (hasPoints || r.ceilings) drawChart(box, r);
    else box.remove();
    document.body.dataset.ready = "1";
  });
}
