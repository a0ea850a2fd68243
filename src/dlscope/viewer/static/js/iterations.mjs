// The Iterations view: the stacked chart with zoom/pan, badges, and re-aggregation (iter start/stop, key node).

import { el, int, bytes, ns } from "./format.mjs";
import { chart } from "./charts.mjs";
import { iterationChart } from "./iterchart.mjs";
import { dataTable } from "./table.mjs";
import { iterFormat } from "./views.mjs";
import { boot, pageScope, update, get, query, viewUrl } from "./state.mjs";
import { startJob } from "./jobs.mjs";

function spinner(label, value, min, max, onChange) {
  const input = el("input", { type: "number", min, max, step: 1, value: value ?? "", "aria-label": label });
  input.addEventListener("input", () => onChange(input.value === "" ? null : Number(input.value)));
  input.addEventListener("wheel", (e) => {
    e.preventDefault();
    const v = Number(input.value || 0) + (e.deltaY < 0 ? 1 : -1);
    input.value = Math.max(min, Math.min(max, v));
    onChange(Number(input.value));
  }, { passive: false });
  return el("label", { class: "spin" }, `${label} `, input);
}

export function renderIterations(content, data, rerender) {
  const a = (boot.aggregations || []).find((x) => String(x.agg_id) === String(data.scope.agg));
  content.append(el("div", { class: "view-head" }, el("h1", { text: "Iterations" }),
    el("p", { class: "hint", text: "Each bar is one iteration, split by resource category; click a bar to open the timeline there. Mouse wheel zooms, drag pans. Gray iterations are outside the aggregation." })));
  const series = data.chart;
  if (!series || !series.rows.length) {
    content.append(el("section", { class: "panel empty" }, el("p", { text: "No iterations were found in this aggregation." })));
    document.body.dataset.ready = "1";
    return;
  }
  const idx = Object.fromEntries(series.columns.map((n, i) => [n, i]));
  const iters = series.rows.map((r) => r[idx.iteration]);
  const profiled = series.rows.filter((r) => r[idx.profiled]).map((r) => r[idx.iteration]);
  const first = Math.min(...iters), last = Math.max(...iters);
  const badge = (label, v) => el("span", { class: "badge", "data-badge": label.toLowerCase() }, el("b", { text: label }), " ", String(v ?? "n/a"));
  const zoomLabel = el("span", { class: "zoom-label", text: "Zoom 1.0x · Tooltip on" });
  const box = el("div", { class: "chart tall" });
  let tip = true;
  let ic = null;
  const setZoom = (z) => { zoomLabel.textContent = `Zoom ${z.toFixed(1)}x · Tooltip ${tip ? "on" : "off"}`; };
  const rankSel = series.ranks.length > 1 ? el("label", {}, "Rank ", el("select", { onchange: (e) => { update({ rank: e.target.value }, true); rerender(); } },
    series.ranks.map((r) => el("option", { value: r, selected: String(r) === String(series.rank), text: String(r) })))) : null;
  const panel = el("section", { class: "panel" },
    el("div", { class: "panel-head" }, el("h2", { text: "Iterations" }),
      el("div", { class: "badges" }, badge("Total", iters.length), badge("Profiled", profiled.length), badge("Start", a?.iter_start), badge("Stop", a?.iter_stop))),
    el("div", { class: "toolbar" },
      el("div", { class: "toggle-group", role: "group" },
        el("button", { class: "btn", type: "button", text: "All Iterations", onclick: () => ic.resetZoom() }),
        el("button", { class: "btn", type: "button", text: "Profiled Iterations", onclick: () => profiled.length && ic.showRange(Math.min(...profiled), Math.max(...profiled)) })),
      el("button", { class: "btn", type: "button", text: "Reset Zoom", onclick: () => ic.resetZoom() }),
      el("button", { class: "btn", type: "button", text: "Toggle Tooltip", onclick: () => { tip = ic.toggleTooltip(); setZoom(ic.zoomFactor()); } }),
      rankSel, traceLink(profiled), el("span", { class: "spacer" }), zoomLabel),
    box);
  content.append(panel);
  if (data.memory) memoryPanel(content, data.memory);

  // Re-aggregation controls
  let newStart = a?.iter_start ?? first, newStop = a?.iter_stop ?? last, keyNode = a?.key_node || "";
  const keyField = el("input", { type: "text", readonly: true, value: keyNode, title: keyNode || "(default key node)", placeholder: "(default)", class: "key-node", "aria-label": "Key node" });
  const reagg = el("section", { class: "panel reagg" },
    el("div", { class: "panel-head" }, el("h2", { text: "Re-aggregate" }), el("p", { class: "hint", text: "Choose another iteration range or key node; the aggregation runs in the background and the viewer stays usable." })),
    el("div", { class: "toolbar" },
      spinner("Select Iter Start", newStart, first, last, (v) => { newStart = v; ic.setBoundaries(newStart, newStop); }),
      spinner("Select Iter Stop", newStop, first, last, (v) => { newStop = v; ic.setBoundaries(newStart, newStop); }),
      el("label", {}, "Key Node ", keyField),
      el("button", { class: "btn", type: "button", text: "Select Key Node…", onclick: () => pickKeyNode((name) => { keyNode = name; keyField.value = name; keyField.title = name; }) }),
      el("button", { class: "btn primary", type: "button", text: "Reaggregate", "data-testid": "reaggregate",
        onclick: () => confirmReaggregate(newStart, newStop, keyNode) })));
  content.append(reagg);
  dataTable(content, { table: "iterations", prefix: "iters", title: "Iteration Table", scope: () => pageScope({ iteration: null, node: null }), rowKey: "iteration", format: iterFormat,
    onRowClick: (row) => { location.href = `/kernels-by-iteration?${query({ ...pageScope({ node: null }), iteration: row.iteration, rank: row.rank })}`; } });

  requestAnimationFrame(() => {
    ic = iterationChart(box, series, { onZoom: setZoom });
    // a click on a bar opens the timeline at that iteration
    ic.chart.on("click", (p) => { location.href = viewUrl("timeline", { iteration: iters[p.dataIndex], rank: series.rank }); });
    ic.setBoundaries(newStart, newStop);
    document.body.dataset.ready = "1";
  });
}

/** Allocated and reserved bytes per device over the aggregation's window (each device's allocator samples,
 * thinned without losing a peak), the peak of each marked, and what ran then. */
function memoryPanel(content, mem) {
  const series = [];
  for (const s of mem.series) {
    const at = (vals) => s.offset_ns.map((t, i) => [t / 1e6, vals[i]]);
    series.push({ name: `${s.label} allocated`, type: "line", step: "end", showSymbol: false, data: at(s.allocated) });
    if (s.reserved.some((v) => v !== null)) series.push({ name: `${s.label} reserved`, type: "line", step: "end", showSymbol: false, lineStyle: { type: "dashed" }, data: at(s.reserved) });
  }
  const lines = mem.peaks.map((d) => {
    const where = d.device < 0 ? "CPU" : `GPU ${d.device}`;
    const cap = d.capacity_bytes ? ` of ${bytes(d.capacity_bytes)}` : "";
    const res = d.peak_reserved_bytes !== null ? `; reserved ${bytes(d.peak_reserved_bytes)}${cap} (iteration ${d.peak_reserved_iteration})` : "";
    return el("li", { "data-testid": "memory-peak", text: `${where}: peak allocated ${bytes(d.peak_allocated_bytes)}${d.basis === "deltas" ? " (since the trace started)" : ""} in iteration ${d.peak_allocated_iteration} during ${d.peak_allocated_op || "no recorded op"}${d.peak_allocated_op_node && d.peak_allocated_op_node !== d.peak_allocated_op ? ` (in ${d.peak_allocated_op_node})` : ""}, ${int(d.live_at_peak.count)} allocations live${res}` });
  });
  const box = el("div", { class: "chart medium", "data-testid": "memory-chart" });
  content.append(el("section", { class: "panel" },
    el("div", { class: "panel-head" }, el("h2", { text: "Memory" }),
      el("p", { class: "hint", text: "Allocator samples (torch.profiler profile_memory): bytes allocated (solid) and reserved by the caching allocator (dashed), in ms from the window's start." })),
    el("ul", { class: "memory-peaks" }, lines), box));
  requestAnimationFrame(() => chart(box).setOption({
    animation: false, legend: { bottom: 0 }, grid: { left: 70, right: 20, top: 20, bottom: 50 },
    tooltip: { trigger: "axis", valueFormatter: (v) => (v === null ? "n/a" : bytes(v)) },
    xAxis: { type: "value", axisLabel: { formatter: (v) => ns(v * 1e6) } },
    yAxis: { type: "value", axisLabel: { formatter: (v) => bytes(v) } },
    dataZoom: [{ type: "inside" }], series }));
}

/** The profiled iterations as a Chrome trace (every rank a process) for Perfetto UI or chrome://tracing:
 * what `dlscope export --iterations A:B` writes, downloaded with a plain same-origin GET. */
function traceLink(profiled) {
  const range = profiled.length ? `${Math.min(...profiled)}:${Math.max(...profiled)}` : null;
  const href = `/api/trace.json?${query({ ...pageScope({ iteration: null, node: null, rank: null, finding: null, call: null }), iterations: range })}`;
  return el("a", { class: "btn", href, download: "", "data-testid": "download-trace",
    title: "Download the profiled iterations as a Chrome trace (open it in ui.perfetto.dev or chrome://tracing)",
    text: "Download trace (Perfetto)" });
}

function dialog(title, body, buttons) {
  const dlg = el("dialog", { class: "modal" }, el("h2", { text: title }), body, el("div", { class: "modal-buttons" }, buttons));
  document.body.append(dlg);
  dlg.addEventListener("close", () => dlg.remove());
  dlg.showModal();
  return dlg;
}

function confirmReaggregate(start, stop, keyNode) {
  if (start !== null && stop !== null && start > stop) { alert("Iter start must not be after iter stop."); return; }
  const dlg = dialog("Reaggregate?", el("p", { text: `Aggregate iterations ${start} to ${stop}${keyNode ? ` with key node ${keyNode}` : ""}? This may take a while; the viewer stays usable.` }), [
    el("button", { class: "btn", type: "button", text: "Cancel", onclick: () => dlg.close() }),
    el("button", { class: "btn primary", type: "button", text: "Yes, reaggregate", "data-testid": "confirm-reaggregate",
      onclick: () => { dlg.close(); startJob({ iter_start: start, iter_stop: stop, key_node: keyNode || null }); } })]);
}

function pickKeyNode(onPick) {
  const host = el("div", { class: "picker" });
  const dlg = dialog("Select Key Node", host, [el("button", { class: "btn", type: "button", text: "Close", onclick: () => dlg.close() })]);
  dataTable(host, { table: "ops", prefix: "keypick", title: "Ops", hint: "Click an op to use it as the key node (one occurrence per iteration)",
    scope: () => pageScope({ node: null, iteration: null }), rowKey: "node_id", show: ["op_name", "op_type", "calls", "gpu_time_ns", "cpu_time_ns"],
    onRowClick: (row) => { onPick(row.op_name); dlg.close(); } });
  void int; void get;
}
