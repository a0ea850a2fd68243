// The table views: Op Type Summary, Group Ops, Ops and Kernels, Kernels by Iteration / by Op, GPUs, All
// Kernels and an expert-system finding's drill-down. Selections go into the URL so every state is shareable.

import { dataTable } from "./table.mjs";
import { el, shareBar, int, nsSpan, pct, ns as nsText } from "./format.mjs";
import { pageScope, update, get, params, viewUrl, query, shownRank } from "./state.mjs";
import { chart, COLORS, esc } from "./charts.mjs";

function heading(content, title, hint) {
  content.append(el("div", { class: "view-head" }, el("h1", { text: title }), hint ? el("p", { class: "hint", text: hint }) : null));
}

function selectAndReload(changes, rerender) {
  update(changes, true);
  rerender();
}

export const iterFormat = {
  kernel_time_ns: (v, r) => shareBar(v, r.duration_ns),
  tc_kernel_time_ns: (v, r) => shareBar(v, r.duration_ns),
};

export function renderOpTypes(content) {
  heading(content, "Op Type Summary", "Metrics of all ops summed by op type. Times in readable units; hover a cell for exact nanoseconds.");
  dataTable(content, { table: "op_types", prefix: "types", title: "Op Types", scope: () => pageScope(), rowKey: "op_type" });
}

export function renderOpsKernels(content, rerender) {
  heading(content, "Ops and Kernel Summaries");
  const node = get("node");
  dataTable(content, { table: "ops", prefix: "ops", title: "Ops", hint: "Click an op to see its kernels below",
    scope: () => pageScope({ node: null }), rowKey: "node_id", selected: node ? Number(node) : null,
    onRowClick: (row) => selectAndReload({ node: row.node_id, "kernels.page": null }, rerender) });
  const host = el("div", { class: "sub" });
  content.append(host);
  if (node) {
    dataTable(host, { table: "op_kernels", prefix: "kernels", title: "Kernel Summaries", hint: `Here is the kernel summary for op ID ${node}`,
      scope: () => pageScope(), rowKey: "kernel_name" });
    fillOpName(host, node);
  } else host.append(el("section", { class: "panel placeholder" }, el("h2", { text: "Kernel Summaries" }), el("p", { class: "hint", text: "Click an op in the table above." })));
}

async function fillOpName(host, node) {
  try {
    const res = await fetch(`/api/table/ops?${query({ ...pageScope({ node: null, iteration: null }), "f.node_id": node, size: 10 })}`);
    const data = await res.json();
    const op = data.rows && data.rows[0];
    const hint = host.querySelector(".panel-head .hint");
    if (op && hint) hint.textContent = `Here is the kernel summary for op ${op.op_name} (ID ${node})`;
  } catch (e) { /* keep the ID-only hint */ }
}

function iterationsTable(host, rerender, { hint, selected }) {
  return dataTable(host, { table: "iterations", prefix: "iters", title: "Iteration Summary", hint,
    scope: () => pageScope({ iteration: null, node: null, rank: null }), rowKey: "iteration", selected, format: iterFormat,
    onRowClick: (row) => selectAndReload({ iteration: row.iteration, rank: row.rank, node: null, "kernels.page": null, "ops.page": null }, rerender) });
}

export function renderKernelsByIteration(content, rerender) {
  heading(content, "Kernels by Iteration", "Click an iteration to see its kernels.");
  const it = get("iteration");
  iterationsTable(content, rerender, { hint: "Click an iteration to see its data", selected: it ? Number(it) : null });
  if (it) dataTable(content, { table: "kernels", prefix: "kernels", title: "Kernels in Selected Iteration", hint: `Here are the kernels for iteration ${it}`,
    scope: () => pageScope({ node: null }), rowKey: "kernel_id", narrowed: true });
  else content.append(el("section", { class: "panel placeholder" }, el("h2", { text: "Kernels in Selected Iteration" }), el("p", { class: "hint", text: "Click an iteration in the table above." })));
}

export function renderKernelsByOp(content, rerender) {
  heading(content, "Kernels by Op", "Pick an iteration, then an op, to see the kernels of that combination.");
  const it = get("iteration"), node = get("node");
  iterationsTable(content, rerender, { hint: "Click an iteration to see its data", selected: it ? Number(it) : null });
  if (!it) {
    content.append(el("section", { class: "panel placeholder" }, el("h2", { text: "Ops in Selected Iteration" }), el("p", { class: "hint", text: "Click an iteration in the table above." })));
    return;
  }
  dataTable(content, { table: "iteration_ops", prefix: "ops", title: "Ops in Selected Iteration", hint: `Ops of iteration ${it}: click an op to see its kernels`,
    scope: () => pageScope({ node: null }), rowKey: "node_id", selected: node ? Number(node) : null,
    onRowClick: (row) => selectAndReload({ node: row.node_id, "kernels.page": null }, rerender) });
  if (node) dataTable(content, { table: "kernels", prefix: "kernels", title: "Kernels in Selected Iteration / Op", hint: `Kernels of op ID ${node} in iteration ${it}`,
    scope: () => pageScope(), rowKey: "kernel_id", narrowed: true, show: ["kernel_name", "device", "launch_ts", "dur", "uses_tc", "grid", "block"] });
  else content.append(el("section", { class: "panel placeholder" }, el("h2", { text: "Kernels in Selected Op" }), el("p", { class: "hint", text: "Click an op in the table above." })));
}

export function renderAllKernels(content) {
  heading(content, "All Kernels", "Every kernel of the profile. Over millions of kernels, sorting is offered on indexed columns; select an iteration (Kernels by Iteration) to sort by any column.");
  dataTable(content, { table: "kernels", prefix: "kernels", title: "Kernels", scope: () => pageScope(), rowKey: "kernel_id", narrowed: Boolean(get("iteration")) });
}

export function renderGroups(content, rerender) {
  heading(content, "Group Ops", "Ops grouped by their scope path; each group sums the ops under it. Click ▶/▼ to expand or collapse.");
  const selection = el("div", { class: "selection", "data-testid": "group-selection" }, el("span", { class: "hint", text: "Click a row to select a group or op." }));
  // Tree state in the URL: open=all (default) with closed=ids collapsed, or open=none / open=ids.
  const ids = (v) => new Set((v || "").split(",").filter((x) => x && x !== "all" && x !== "none").map(Number));
  const toggle = (row) => {
    const p = params();
    const open = p.get("open") || "all";
    if (open === "all") {
      const closed = ids(p.get("closed"));
      if (row.expanded) closed.add(row.group_id); else closed.delete(row.group_id);
      update({ closed: [...closed].join(",") || null });
    } else {
      const set = ids(open);
      if (row.expanded) set.delete(row.group_id); else set.add(row.group_id);
      update({ open: [...set].join(",") || "none" });
    }
    rerender();
  };
  content.append(el("div", { class: "tree-controls" },
    el("button", { class: "btn", type: "button", text: "Expand All", onclick: () => { update({ open: null, closed: null, "groups.page": null }); rerender(); } }),
    el("button", { class: "btn", type: "button", text: "Collapse All", onclick: () => { update({ open: "none", closed: null, "groups.page": null }); rerender(); } }),
    selection));
  dataTable(content, { table: "groups", prefix: "groups", title: "Group Ops View",
    scope: () => ({ ...pageScope(), open: params().get("open"), closed: params().get("closed") }), rowKey: "group_id",
    onRowClick: (row) => {
      selection.replaceChildren(el("b", { text: row.is_group ? "Group Name Selected: " : "Op Name Selected: " }), el("span", { class: "path", text: row.path || row.name }),
        row.is_group ? "" : el("span", {}, "  ", el("b", { text: "Op ID Selected: " }), el("a", { href: viewUrl("ops-kernels", { node: row.node_id }), text: String(row.node_id) })));
    },
    format: {
      is_group: (v) => el("span", { class: v ? "tag group" : "tag op", text: v ? "Group" : "Op" }),
      name: (v, row) => {
        const pad = el("span", { class: "indent", style: `width:${(row.level - 1) * 14}px` });
        const tog = row.has_children ? el("button", { class: "tree-toggle", type: "button", "aria-label": row.expanded ? "Collapse" : "Expand", text: row.expanded ? "▼" : "▶",
          onclick: (e) => { e.stopPropagation(); toggle(row); } }) : el("span", { class: "tree-leaf", text: "–" });
        return el("span", { class: "tree-name", title: row.path || v }, pad, tog, " ", el("span", { text: v }));
      },
    } });
}

export function renderGpus(content, data) {
  const rows = data.gpus || [];
  const active = rows.filter((r) => r.state === "active");
  const idle = rows.length - active.length;
  heading(content, "GPUs", `Each physical GPU (host and device) once, with the rank that used it and its utilization in that rank's aggregation window${idle ? `; ${idle} present but idle (no GPU activity)` : ""}.`);
  const box = el("div", { class: "chart medium", "data-testid": "gpu-chart" });
  const panelEl = el("section", { class: "panel" }, el("div", { class: "panel-head" }, el("h2", { text: "GPU Utilization" }),
    el("p", { class: "hint", text: active.length ? `mean of ${active.length} GPUs: ${pct(mean(active.map((r) => r.utilization)))}` : "no GPU ran GPU activity" })), box);
  content.append(panelEl);
  dataTable(content, { table: "gpus", prefix: "gpus", title: "GPUs", scope: () => pageScope(), rowKey: "row",
    format: { ranks: (v) => (v === "" ? el("span", { class: "na", text: "idle" }) : el("span", { text: `rank ${v}` })),
      host: (v) => (v ? el("span", { text: v }) : el("span", { class: "na", text: "not recorded" })) } });
  const label = (r) => `${r.host ? `${r.host} ` : ""}GPU ${r.device} · rank ${r.ranks}`;
  requestAnimationFrame(() => {
    if (!active.length) { box.replaceWith(el("p", { class: "na", text: "No GPU ran kernels, memcpy or memset." })); document.body.dataset.ready = "1"; return; }
    const c = chart(box);
    c.setOption({ animation: false, grid: { left: 60, right: 20, top: 20, bottom: active.length > 8 ? 80 : 40 },
      tooltip: { trigger: "axis", formatter: (items) => {
        const r = active[items[0].dataIndex];
        return `${esc(label(r))}<br/>${esc(r.name || "")}<br/><b>${pct(r.utilization)}</b> busy: ${esc(nsText(r.busy_ns))}`;
      } },
      xAxis: { type: "category", data: active.map(label), axisLabel: { rotate: active.length > 8 ? 45 : 0, interval: 0 } },
      yAxis: { type: "value", max: 100, name: "Utilization (%)" },
      series: [{ type: "bar", barMaxWidth: 40, itemStyle: { color: COLORS.busy }, data: active.map((r) => (r.utilization === null ? 0 : r.utilization * 100)) }] });
    document.body.dataset.ready = "1";
  });
}

function mean(xs) {
  const v = xs.filter((x) => x !== null && x !== undefined);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
}

export function renderFinding(content, data) {
  const f = (data.dashboard_findings || []).find(() => false);
  void f;
  heading(content, "Expert System Finding", "The ops, kernels and iterations this finding is about.");
  const s = data.scope;
  const box = el("section", { class: "panel finding" }, el("div", { class: "panel-head" }, el("h2", { text: `Finding ${s.finding}` })));
  content.append(box);
  fetch(`/dashboard?${query({ ...pageScope({ finding: null }), _format: "json" })}`).then((r) => r.json()).then((d) => {
    const fd = (d.dashboard.findings || []).find((x) => String(x.finding_id) === String(s.finding));
    if (fd) box.append(el("p", { class: "problem", text: fd.problem || "" }), el("p", { class: "recommendation", text: fd.recommendation || "" }));
  });
  if (s.nodes) dataTable(content, { table: "ops", prefix: "ops", title: `Ops concerned (${s.nodes.length})`, scope: () => ({ ...pageScope({ finding: null }), nodes: JSON.stringify(s.nodes) }), rowKey: "node_id",
    onRowClick: (row) => { location.href = viewUrl("ops-kernels", { node: row.node_id }); } });
  if (s.kernel_names) dataTable(content, { table: "kernel_summary", prefix: "kernels", title: `Kernels concerned (${s.kernel_names.length})`, scope: () => ({ ...pageScope({ finding: null }), kernel_names: JSON.stringify(s.kernel_names) }), rowKey: "kernel_name" });
  if (s.iterations) dataTable(content, { table: "iterations", prefix: "iters", title: `Iterations concerned (${s.iterations.length})`, scope: () => ({ ...pageScope({ finding: null }), iterations: JSON.stringify(s.iterations) }), rowKey: "iteration", format: iterFormat });
  if (s.time_ranges) content.append(el("section", { class: "panel" }, el("div", { class: "panel-head" }, el("h2", { text: `Time ranges concerned (${s.time_ranges.length})` }),
    el("p", { class: "hint", text: "Each opens the timeline at that range." })),
  el("ul", { class: "time-ranges", "data-testid": "finding-time-ranges" }, s.time_ranges.map(([a, b], i) => el("li", {},
    el("a", { href: viewUrl("timeline", { rank: shownRank(), start: a, end: b }), "data-testid": "finding-timeline", text: `Range ${i + 1}: ${nsText(Number(BigInt(b) - BigInt(a)))} from ${a} ns` }))))));
  if (!s.nodes && !s.kernel_names && !s.iterations && !s.time_ranges) content.append(el("p", { class: "hint", text: "This finding names no ops, kernels, iterations or time ranges." }));
  void int; void nsSpan;
}
