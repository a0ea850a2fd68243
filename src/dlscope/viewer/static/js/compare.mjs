// The Compare view (two databases): verdict and key changes, metrics side by side, the resource breakdown
// base vs new, and op types / ops / kernels by impact. Lower times are better: a drop shows green, a rise red.

import { el, ns, int, pct, NA, exactNs } from "./format.mjs";
import { chart, esc, timeAxis } from "./charts.mjs";
import { dataTable } from "./table.mjs";
import { params, boot } from "./state.mjs";

const KEYS = ["base", "new", "base_agg", "new_agg"];
const BASE_COLOR = "#90a4ae", NEW_COLOR = "#76b900";

/** The comparison's page parameters (sides and aggregations) for every table request. */
function compareScope() {
  const p = params(), out = {};
  for (const k of ["db", ...KEYS]) if (p.get(k) !== null) out[k] = p.get(k);
  return out;
}

function go(changes) {
  const p = params();
  for (const k of [...p.keys()]) if (!KEYS.includes(k) && k !== "db") p.delete(k);  // table state belongs to the old pair
  for (const [k, v] of Object.entries(changes)) { if (v === null || v === undefined) p.delete(k); else p.set(k, String(v)); }
  location.href = `${location.pathname}?${p}`;
}

/** A signed change: "+1.25 ms" red when higher is worse, "−58.08 ms" green; exact value on hover. */
export function signed(v, { unit = "ns", better = "lower" } = {}) {
  if (v === null || v === undefined) return el("span", { class: "na", text: NA });
  const zero = Math.abs(v) < 1e-9;
  const text = unit === "ns" ? ns(Math.abs(v)) : unit === "ratio" ? `${(Math.abs(v) * 100).toFixed(1)} pt` : int(Math.abs(v));
  const good = better === "higher" ? v > 0 : v < 0;
  const cls = zero || better === null ? "delta" : `delta ${good ? "better" : "worse"}`;
  const title = unit === "ns" ? `${v > 0 ? "+" : v < 0 ? "−" : "±"}${exactNs(Math.abs(v))}` : String(v);
  return el("span", { class: cls, title, text: `${zero ? "±" : v > 0 ? "+" : "−"}${zero && unit === "ns" ? "0 ns" : text}` });
}

function ratio(v) {
  return el("span", { class: v === null || v === undefined ? "na" : "ratio", title: v === null || v === undefined ? "" : String(v), text: v === null || v === undefined ? NA : `${v.toFixed(2)}×` });
}

function value(v, unit) {
  if (v === null || v === undefined) return el("span", { class: "na", text: NA });
  if (unit === "ns") return el("span", { title: exactNs(v), text: ns(v) });
  if (unit === "ratio") return el("span", { title: `${(v * 100).toFixed(4)} %`, text: pct(v) });
  return el("span", { title: String(v), text: int(v) });
}

function statusTag(v, row) {
  const label = v === "both" ? (row && row.match && row.match !== "same" ? row.match.replace(/_/g, " ").replace(/,/g, ", ") : "in both") : v;
  return el("span", { class: `tag status-${v}`, title: v === "both" ? "in both runs" : v === "new" ? "only in the new run" : "only in the base run", text: label });
}

/** Open a database listed by GET /api/databases (the runs next to this one) and return its key. */
async function openRun(path) {
  const res = await fetch("/api/databases", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ path }) });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body.key;
}

/** A picker of the runs this one can be compared with: those open, and the databases in the same folders. */
function runPicker(label, choices, onPick, testid) {
  const sel = el("select", { "aria-label": label, "data-testid": testid },
    el("option", { value: "", text: choices.length ? "choose a run…" : "no other dlscope database in this folder" }),
    choices.map((c) => el("option", { value: c.key !== null && c.key !== undefined ? `key:${c.key}` : `path:${c.path}`, title: c.path, text: `${c.name} — ${c.path.split("/").pop()}` })));
  const note = el("span", { class: "hint" });
  sel.addEventListener("change", async () => {
    if (!sel.value) return;
    try {
      const key = sel.value.startsWith("key:") ? sel.value.slice(4) : await openRun(sel.value.slice(5));
      onPick(key);
    } catch (err) { note.textContent = err.message; }
  });
  return el("label", { class: "run-picker" }, `${label} `, sel, note);
}

async function candidates() {
  const res = await fetch("/api/databases");
  return res.ok ? (await res.json()).databases : [];
}

function renderPicker(content, data) {
  const me = boot.profiles.find((p) => p.key === boot.db) || boot.profiles[0];
  content.append(el("div", { class: "view-head" }, el("h1", { text: "Compare Runs" }),
    el("p", { class: "hint", text: `Pick the run to compare ${me.name} with: the dlscope databases in the same folder are listed (or start the viewer with two databases: dlscope view BASE.sqlite NEW.sqlite).` })));
  const panel = el("section", { class: "panel compare-picker", "data-testid": "compare-picker" },
    el("div", { class: "panel-head" }, el("h2", { text: "Second run" })),
    runPicker(`Compare ${me.name} (base) with`, data.choices || [], (key) => { location.href = `/compare?base=${encodeURIComponent(me.key)}&new=${encodeURIComponent(key)}`; }, "pick-new"));
  content.append(panel);
  document.body.dataset.ready = "1";
}

function runCard(side, d, choices) {
  const r = d[side];
  const aggs = r.aggregations || [];
  const iters = r.iterations_profiled ? `iterations ${r.iter_start}–${r.iter_stop} (${r.iterations_profiled})` : "whole profile";
  const gpus = [...new Set(r.gpus || [])].join(", ");
  const sel = aggs.length > 1 ? el("select", { "aria-label": `${side} aggregation`, onchange: (e) => go({ [`${side}_agg`]: e.target.value }) },
    aggs.map((a) => el("option", { value: a.agg_id, selected: a.agg_id === r.agg_id, text: `agg ${a.agg_id}: ${a.iter_start ?? "all"}–${a.iter_stop ?? ""}` }))) : null;
  const other = choices.filter((c) => String(c.key) !== String(r.key));
  return el("div", { class: `run-card run-${side}`, "data-testid": `run-${side}` },
    el("span", { class: "run-role", text: side === "base" ? "Base (before)" : "New (after)" }),
    el("b", { class: "run-name", title: r.path, text: r.profile_name }),
    el("span", { class: "hint", text: `${iters}${gpus ? ` · ${gpus}` : ""}` }), sel,
    runPicker("Another run:", other, (key) => go({ [side]: key, [`${side}_agg`]: null }), `pick-${side}`));
}

function verdictPanel(d) {
  const m = d.metrics.find((x) => x.metric === "avg_iteration_time" && x.verdict) || d.metrics.find((x) => x.metric === "wall_clock");
  const tone = m && m.verdict ? m.verdict : "same";
  const kinds = { category: "Breakdown", op_type: "Op type", kernel: "Kernel" };
  return el("section", { class: `panel verdict-panel tone-${tone}` },
    el("div", { class: "verdict", "data-testid": "verdict", text: d.verdict }),
    d.batch_size ? el("p", { class: "hint", "data-testid": "batch-size", text: `Batch size ${d.batch_size.base} → ${d.batch_size.new} (agreed by ${d.batch_size.ops} ops): per-iteration times are not per-sample.` }) : null,
    el("h2", { text: "Key changes" }),
    el("ol", { class: "key-changes", "data-testid": "key-changes" }, d.key_changes.map((k) =>
      el("li", {}, el("span", { class: `tag kind-${k.kind}`, text: kinds[k.kind] || k.kind }), " ", el("span", { class: "key-text", text: k.text })))),
    el("p", { class: "hint", text: d.values === "per_iteration" ? "Times are per iteration (both runs have iterations), so runs of different lengths compare." : "Times are totals of each aggregation window (a run has no iterations)." }));
}

function metricsPanel(d) {
  const rows = d.metrics.filter((m) => !m.category && !m.share);
  return el("section", { class: "panel p-metrics" }, el("div", { class: "panel-head" }, el("h2", { text: "Metrics" }), el("p", { class: "hint", text: "Side by side; Δ = new − base." })),
    el("table", { class: "grid compare-metrics", "data-testid": "metrics" },
      el("thead", {}, el("tr", {}, ["Metric", "Base", "New", "Δ", "Ratio", ""].map((h) => el("th", { text: h })))),
      el("tbody", {}, rows.map((m) => el("tr", { "data-metric": m.metric, title: m.unavailable || "" },
        el("td", { text: m.label }), el("td", { class: "num base" }, value(m.base, m.unit)), el("td", { class: "num new" }, value(m.new, m.unit)),
        el("td", { class: "num" }, signed(m.delta, { unit: m.unit, better: m.better })), el("td", { class: "num" }, ratio(m.ratio)),
        el("td", {}, m.verdict ? el("span", { class: `verdict-tag ${m.verdict}`, text: m.verdict }) : el("span", { class: "na", text: m.unavailable ? "n/a" : "" })))))));
}

function breakdownPanel(d) {
  const box = el("div", { class: "chart medium", "data-testid": "breakdown-chart" });
  const table = el("table", { class: "grid compare-breakdown", "data-testid": "breakdown" },
    el("thead", {}, el("tr", {}, ["Category", "Base", "New", "Δ", "Ratio", "Share base → new"].map((h) => el("th", { text: h })))),
    el("tbody", {}, d.breakdown.map((b) => el("tr", { "data-category": b.category },
      el("td", { text: b.label }), el("td", { class: "num base" }, value(b.base_ns, "ns")), el("td", { class: "num new" }, value(b.new_ns, "ns")),
      el("td", { class: "num" }, signed(b.delta_ns)), el("td", { class: "num" }, ratio(b.ratio)),
      el("td", { class: "num share", text: `${pct(b.base_share)} → ${pct(b.new_share)}` })))));
  const panel = el("section", { class: "panel p-breakdown-compare" }, el("div", { class: "panel-head" }, el("h2", { text: "Resource Usage Breakdown" }),
    el("p", { class: "hint", text: d.values === "per_iteration" ? "per iteration, base vs new" : "base vs new" })), box, table);
  return [panel, () => {
    const c = chart(box);
    const max = Math.max(1, ...d.breakdown.flatMap((b) => [b.base_ns || 0, b.new_ns || 0]));
    const axis = timeAxis(max);
    c.setOption({ animation: false, grid: { left: 64, right: 16, top: 34, bottom: 56 },
      legend: { top: 0, data: ["Base", "New"], itemWidth: 12, itemHeight: 10 },
      tooltip: { trigger: "axis", axisPointer: { type: "shadow" }, confine: true, formatter: (items) => {
        const b = d.breakdown[items[0].dataIndex];
        const sign = b.delta_ns > 0 ? "+" : b.delta_ns < 0 ? "−" : "±";
        return [`<b>${esc(b.label)}</b>`, `Base: <b>${ns(b.base_ns)}</b> (${pct(b.base_share)} of the run)`, `New: <b>${ns(b.new_ns)}</b> (${pct(b.new_share)} of the run)`,
          `Δ: <b>${sign}${ns(Math.abs(b.delta_ns || 0))}</b>`].join("<br/>");
      } },
      xAxis: { type: "category", data: d.breakdown.map((b) => b.label.replace(/ \(.*\)$/, "")), axisLabel: { interval: 0, fontSize: 11, width: 78, overflow: "break", lineHeight: 13 } },
      yAxis: { type: "value", name: `Time (${axis.unit})`, axisLabel: { formatter: (v) => +(v / axis.scale).toFixed(2) } },
      series: [{ name: "Base", type: "bar", data: d.breakdown.map((b) => b.base_ns), itemStyle: { color: BASE_COLOR }, barGap: "10%", barMaxWidth: 34 },
        { name: "New", type: "bar", data: d.breakdown.map((b) => b.new_ns), itemStyle: { color: NEW_COLOR }, barMaxWidth: 34 }] });
  }];
}

function onlyPanel(d) {
  const list = (title, names, cls, testid) => el("div", { class: `only-list ${cls}`, "data-testid": testid },
    el("h3", {}, el("span", { class: `tag status-${cls}`, text: cls }), ` ${title} (${names.length})`),
    names.length ? el("ul", {}, names.map((n) => el("li", { title: n, text: n }))) : el("p", { class: "na", text: "none" }));
  return el("section", { class: "panel p-only" }, el("div", { class: "panel-head" }, el("h2", { text: "Ops Present in Only One Run" }),
    el("p", { class: "hint", text: `${int(d.op_names.in_both)} op names are in both runs.` })),
    el("div", { class: "only-grid" }, list("only in the base run", d.op_names.only_in_base, "vanished", "only-in-base"),
      list("only in the new run", d.op_names.only_in_new, "new", "only-in-new")));
}

const deltaFmt = (unit) => (v) => signed(v, { unit, better: unit === "ns" ? "lower" : null });
const FORMAT = {
  status: (v, row) => statusTag(v, row),
  delta_gpu_time_ns: deltaFmt("ns"), delta_cpu_time_ns: deltaFmt("ns"), delta_calls: deltaFmt("count"), delta_kernel_count: deltaFmt("count"),
  gpu_time_ns_ratio: ratio, cpu_time_ns_ratio: ratio,
};
const rowClass = (row) => (row.status === "both" ? "" : `row-${row.status}`);

export async function renderCompare(content, data) {
  const d = data.compare;
  if (!d) { renderPicker(content, data); return; }
  const choices = await candidates();
  content.append(el("div", { class: "view-head compare-head" }, el("h1", { text: "Compare Runs" }),
    el("div", { class: "runs" }, runCard("base", d, choices), el("button", { class: "btn swap", type: "button", title: "Swap base and new", text: "⇄ Swap",
      onclick: () => go({ base: d.new.key, new: d.base.key, base_agg: null, new_agg: null }) }), runCard("new", d, choices))));
  const [breakdown, drawBreakdown] = breakdownPanel(d);
  content.append(verdictPanel(d), el("div", { class: "compare-grid" }, metricsPanel(d), breakdown));
  const counts = (c) => Object.entries(c || {}).filter(([k]) => ["new", "vanished", "both"].includes(k)).map(([k, v]) => `${int(v)} ${k === "both" ? "in both" : k}`).join(", ");
  const common = { scope: compareScope, format: FORMAT, rowClass };
  dataTable(content, { ...common, table: "compare_op_types", prefix: "types", title: "Op Types by Impact", hint: `${counts(d.counts.op_types)}. Impact = the larger of the GPU and CPU time change.`, rowKey: "row" });
  dataTable(content, { ...common, table: "compare_ops", prefix: "ops", title: "Ops by Impact", hint: `${counts(d.counts.ops)}. Ops are matched by name, scope and shapes; search Change for "new" or "vanished".`, rowKey: "row" });
  dataTable(content, { ...common, table: "compare_kernels", prefix: "kernels", title: "Kernels by Impact", hint: `${counts(d.counts.kernels)}.`, rowKey: "row" });
  content.append(onlyPanel(d));
  requestAnimationFrame(() => { drawBreakdown(); document.body.dataset.ready = "1"; });
}
