// The Dashboard: DLProf's panels, fed by /dashboard?_format=json (the aggregation's stored figures).

import { el, ns, nsSpan, int, pct, boolMark, NA, exactNs } from "./format.mjs";
import { donut, COLORS } from "./charts.mjs";
import { iterationChart } from "./iterchart.mjs";
import { viewUrl, update, get, shownRank, boot } from "./state.mjs";
import { ranksTable } from "./job.mjs";

const TIPS = {
  wall: "Time from the start of the first op of the start iteration on the CPU to the end of the last CPU op or GPU activity of the stop iteration, whichever is later.",
  tce: "GPU time of Tensor Core kernels / GPU time of all kernels of Tensor Core eligible ops. 100 % means every eligible op runs only Tensor Core kernels. Higher is better.",
  util: "Average GPU utilization across all GPUs: the union of kernel intervals over the wall clock time. Higher is better.",
  total: "The number of iterations found in the profile.",
  profiled: "The number of iterations aggregated: from Start Iteration to Stop Iteration, inclusive.",
  avg: "Wall clock time divided by the number of profiled iterations.",
  on_gpu: "The GPU ran behind the CPU (the CPU queued iterations ahead), so the iteration windows time the CPU's pace: each iteration timed on the GPU instead, from the end of the previous iteration's GPU work to the end of its own (the first from its window's start).",
  lag: "How long after its CPU window an iteration's GPU work ended, on the median of the profiled iterations but the last.",
  op_nodes: "Ops at the level the model's code calls them (the outermost framework ops, e.g. aten::linear for nn.Linear); the ops nested in them are counted in them, never twice.",
  tc_eligible_op_nodes: "Op nodes whose type can run on Tensor Cores (GEMM, convolution, attention, RNN families), or that contain such an op.",
  op_nodes_using_tc: "TC eligible op nodes with at least one Tensor Core kernel beneath them.",
  tc_eligible_share: "GPU time (kernels and memory operations) of TC eligible op nodes, as a share of the GPU time of all op nodes.",
  throughput: "Samples per step × profiled iterations / wall clock time; the batch size comes from dlscope import --batch-size / --samples-per-step or the first batch dlscope profile saw. Higher is better.",
  reader: "Reader cost: the mean time a step spends inside data loading (the whole DataLoader __next__, whatever the GPU does meanwhile).",
  reader_ratio: "Reader cost / batch cost: the share of the step time spent waiting for batches. Lower is better.",
  mfu: "Model FLOPs utilization: the matrix-product FLOPs of the ops (forward and backward, from their shapes) per second of wall clock, over the GPU's dense peak at the precision they ran at.",
  model_flops: "Matrix-product FLOPs of the ops of one iteration, from the shapes the trace recorded (no bias adds, no recomputation).",
};

const GUIDANCE = [
  ["Understanding GPU utilization and timing details of the operations is the first step in profiling your model.", null],
  ["Tensor Cores and mixed precision training: ", "https://developer.nvidia.com/tensor-cores"],
  ["Train with mixed precision and make full use of Tensor Cores (PyTorch AMP): ", "https://pytorch.org/docs/stable/amp.html"],
  ["Mixed precision training guide (TensorFlow and others): ", "https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html"],
  ["If several kernels run for one op node, some likely transpose data so Tensor Cores can use it; such transposes themselves do not use Tensor Cores.", null],
];

function panel(title, cls, ...body) {
  return el("section", { class: `panel ${cls || ""}` }, el("div", { class: "panel-head" }, el("h2", { text: title })), ...body);
}

function info(text) { return el("span", { class: "info", tabindex: "0", title: text, "aria-label": text, text: "i" }); }

/** Text with URLs turned into links that open a new tab (built as DOM: the text stays text). */
export function linkify(text) {
  const out = el("span");
  const parts = String(text || "").split(/(https?:\/\/[^\s)]+)/g);
  parts.forEach((part, i) => {
    if (i % 2) out.append(el("a", { href: part, target: "_blank", rel: "noopener noreferrer", text: part }));
    else out.append(part);
  });
  return out;
}

/** The iterations timed on the GPU (the summary's iteration_on_gpu_ns), only where the GPU ran behind the CPU. */
function onGpuRows(g, ms) {
  if (!g) return [];
  const figures = el("span", { "data-testid": "iteration-on-gpu", "data-min": g.min, "data-median": g.median, "data-max": g.max, "data-slowest": g.slowest_iteration },
    ms(g.min), " / ", ms(g.median), " / ", ms(g.max), ` (iteration ${g.slowest_iteration})`);
  const lag = el("span", { "data-testid": "gpu-lag", "data-ns": g.median_lag }, ms(g.median_lag));
  return [["Iteration Time on the GPU (ms): min / median / max", figures, TIPS.on_gpu], ["GPU Behind the CPU (ms, median)", lag, TIPS.lag]];
}

function kv(rows) {
  return el("table", { class: "kv" }, el("tbody", {}, rows.map(([k, v, tip]) =>
    el("tr", {}, el("th", {}, el("span", { class: "label", text: k }), tip ? info(tip) : null), el("td", {}, v instanceof Node ? v : (v === null || v === undefined ? el("span", { class: "na", text: NA }) : String(v)))))));
}

export function kernelDetails(k) {
  const row = (label, [t, n]) => el("tr", {}, el("th", { text: label }), el("td", {}, nsSpan(t)), el("td", { text: int(n) }));
  return el("div", { class: "kernel-details" },
    el("div", { class: "details-head" }, el("h2", { text: "Kernel Details" }),
      el("button", { class: "close", type: "button", title: "Close the details pane", "aria-label": "Close", text: "✕",
        onclick: () => { update({ details: null }); document.getElementById("details").hidden = true; } })),
    el("table", { class: "grid" }, el("thead", {}, el("tr", {}, el("th", { text: "" }), el("th", { text: "Total GPU Time" }), el("th", { text: "Total Count" }))),
      el("tbody", {}, row("All Kernels", k.all), row("Kernels Using TC", k.tc), row("Memory Kernels", k.memory), row("All Other Kernels", k.other),
        row("Total (kernels and memory)", gpuTotal(k)))),
    el("p", { class: "hint", text: "TC stands for Tensor Cores. GPU Time is the cumulative time executing GPU kernels (memory: memcpy/memset)." }));
}

/** [time, count] of all GPU work in the Total Kernel GPU Time donut: its three slices (TC, memory, other) added. */
export function gpuTotal(k) {
  const parts = [k.tc, k.memory, k.other];
  if (parts.some((x) => x[0] === null || x[0] === undefined)) return [null, null];
  return [parts.reduce((a, x) => a + x[0], 0), parts.reduce((a, x) => a + (x[1] || 0), 0)];
}

export function showDetails(k) {
  const pane = document.getElementById("details");
  pane.replaceChildren(kernelDetails(k));
  pane.hidden = false;
  update({ details: "kernels" });
}

/** The job as one thing (the summary JSON's ``job``): wall clock, mean GPU utilization over every GPU, ranks. */
function jobPanels(grid, job, a) {
  const ms = (v) => (v === null || v === undefined ? null : el("span", { title: exactNs(v), text: (v / 1e6).toFixed(3) }));
  const gc = job.gpu_counts || {};
  const span = job.wall_clock_method === "span" ? "from the earliest rank's start to the latest rank's end"
    : "the longest rank's: the ranks' clocks do not line up";
  grid.append(panel(`Job of ${job.ranks} ranks`, "p-job", el("div", { class: "job-grid" },
    kv([
      ["Job Wall Clock (ms)", ms(job.wall_clock_ns), `The job's wall clock, ${span}.`],
      ["GPU Utilization, all GPUs (%)", job.gpu_utilization === null ? null : el("span", { title: `${(job.gpu_utilization * 100).toFixed(4)} % = mean of ${job.gpu_count} GPUs`, text: (job.gpu_utilization * 100).toFixed(1) }),
        "Mean over every GPU that ran GPU work of its busy time over its rank's wall clock. Each GPU: More…"],
      ["GPUs", `${int(gc.active)} used${gc.idle ? `, ${int(gc.idle)} idle` : ""}`, "Each physical GPU (host and device) once."],
      ["Ranks", job.ranks], ["Hosts", job.hosts === null ? el("span", { class: "na", text: "not recorded in the traces" }) : job.hosts],
      ["Collective Calls", job.collective_calls],
    ]),
    el("div", { class: "job-links" },
      el("a", { class: "more", href: viewUrl("gpus"), text: "More… (each GPU)" }),
      el("a", { class: "more", href: viewUrl("ranks"), text: "Ranks →" }),
      el("a", { class: "more", href: viewUrl("collectives"), text: "Collectives →" })))));
  ranksTable(grid, { title: `Ranks (${job.ranks})`, hint: "Click a rank to see its dashboard; the straggler score says which rank the others wait for.", selected: a.rank })
    .section.classList.add("p-ranks");
  grid.append(el("section", { class: "panel p-rank-head", "data-testid": "rank-head" },
    el("h2", { text: `Rank ${a.rank}` }),
    el("p", { class: "hint", text: `The panels below are rank ${a.rank}'s (aggregation ${a.agg_id}). Pick another rank in the Ranks table or the Rank menu.` })));
}

export function renderDashboard(content, data) {
  const d = data.dashboard;
  const a = d.aggregation;
  if (!a && (boot.views || []).some((v) => v.slug === "python" && v.menu) && d.notice) {
    content.append(el("section", { class: "panel empty", "data-testid": "python-only" }, el("h2", { text: "A Python call tree" }),
      el("p", { text: `Nothing to aggregate: ${d.notice}.` }), el("a", { href: viewUrl("python"), text: "Open Python Call Stacks" })));
    document.body.dataset.ready = "1";
    return;
  }
  if (!a) {
    content.append(el("section", { class: "panel empty" }, el("h2", { text: "No aggregation yet" }),
      el("p", { text: "This database holds no aggregation: run `dlscope aggregate DB` or re-aggregate from the Iterations view." })));
    document.body.dataset.ready = "1";
    return;
  }
  const grid = el("div", { class: "dashboard" });
  content.append(grid);
  const job = d.job && d.job.ranks > 1 ? d.job : null;
  const of = job ? ` · rank ${a.rank}` : "";   // every per-rank panel says whose figures it shows
  if (job) jobPanels(grid, job, a);

  const charts = [];
  const chartBox = () => el("div", { class: "chart small" });

  // GPU utilization
  const util = a.gpu_utilization;
  const utilBox = chartBox();
  const more = d.gpus.length > 1 ? el("a", { class: "more", href: viewUrl("gpus"), text: "More… (all GPUs)" }) : null;
  grid.append(panel(`GPU Utilization${of}`, "p-util", utilBox, util === null ? el("p", { class: "na", text: "GPU utilization was not measured (no GPU activity)." }) : null, more));
  if (util !== null) charts.push(() => donut(utilBox, [["Using GPU", util, COLORS.busy], ["Idle GPU", 1 - util, COLORS.idle]],
    { fmt: (v) => pct(v), exact: (v) => `${(v * 100).toFixed(4)} %`, center: pct(util) }));

  // Resource usage breakdown
  const brBox = chartBox();
  grid.append(panel(`Resource Usage Breakdown${of}`, "p-breakdown", brBox));
  const keys = ["tensor_core_ns", "non_tensor_core_ns", "memory_ns", "dataloader_ns", "io_ns", "cpu_ns", "other_ns"];
  charts.push(() => donut(brBox, d.breakdown.map(([label, v], i) => [label, v, COLORS[keys[i]]])));

  // Total kernel GPU time
  const kBox = chartBox();
  const k = d.kernels;
  const detailsBtn = el("button", { class: "icon-btn", type: "button", title: "Show Kernel Details", "aria-label": "Show Kernel Details", text: "☰ Details", onclick: () => showDetails(k) });
  const total = gpuTotal(k);
  const kPanel = panel(`Total Kernel GPU Time${of}`, "p-kernels", kBox,
    total[0] ? el("p", { class: "hint", "data-testid": "kernel-total-parts", text: `${ns(total[0])} = kernels ${ns(k.all[0])} + memory operations ${ns(k.memory[0])}` }) : null);
  kPanel.querySelector(".panel-head").append(detailsBtn);
  grid.append(kPanel);
  charts.push(() => donut(kBox, [["Using Tensor Cores", k.tc[0], COLORS.tensor_core_ns], ["Memory Kernels", k.memory[0], COLORS.memory_ns],
    ["All Other Kernels", k.other[0], COLORS.non_tensor_core_ns]], { center: ns(total[0]), empty: "No GPU kernels or memory operations ran in this aggregation." }));

  // Tensor Core kernel efficiency
  // why a figure is n/a or what it leaves out (present/graph_replay.py: the summary's and the report's words)
  const notes = d.notes || {};
  const eff = a.tc_kernel_efficiency;
  const eBox = chartBox();
  grid.append(panel(`Tensor Core Kernel Efficiency${of}`, "p-tce", eBox,
    eff === null ? el("p", { class: "na", "data-testid": "tce-note", text: `Efficiency cannot be computed: ${notes.tc_kernel_efficiency_note || "no Tensor Core eligible ops ran kernels"}.` })
      : notes.tc_kernel_efficiency_note ? el("p", { class: "hint", "data-testid": "tce-note", text: `Efficiency ${notes.tc_kernel_efficiency_note}.` }) : null));
  if (eff !== null) charts.push(() => donut(eBox, [["Tensor Core kernels", eff, COLORS.tensor_core_ns], ["Other kernels of eligible ops", 1 - eff, COLORS.idle]],
    { fmt: (v) => pct(v), exact: (v) => `${(v * 100).toFixed(4)} %`, center: pct(eff) }));

  // Performance summary
  const tp = d.throughput;
  const secs = (v) => (v === null || v === undefined ? null : el("span", { title: exactNs(v), text: (v / 1e9).toFixed(3) }));
  const ms = (v) => (v === null || v === undefined ? null : el("span", { title: exactNs(v), text: (v / 1e6).toFixed(3) }));
  const noted = (v, note, id) => (!note ? v : v === null ? el("span", { class: "na", "data-testid": id, text: `${NA} (${note})` })
    : el("span", { "data-testid": id, title: note, text: String(v) }));
  grid.append(panel(`Performance Summary${of}`, "p-summary", kv([
    ["Wall Clock Time (s)", secs(a.wall_clock_ns), TIPS.wall],
    ["Tensor Core Kernel Efficiency (%)", noted(eff === null ? null : (eff * 100).toFixed(1), notes.tc_kernel_efficiency_note, "tce-na"), TIPS.tce],
    ["GPU Utilization (%)", util === null ? null : (util * 100).toFixed(1), TIPS.util],
    ["Total Iterations", d.total_iterations, TIPS.total],
    ["Profiled Iterations", a.iterations_profiled, TIPS.profiled],
    ["Start Iteration", a.iter_start], ["Stop Iteration", a.iter_stop],
    ["Average Iteration Time (ms)", ms(a.avg_iteration_ns), TIPS.avg],
    ...onGpuRows(d.iteration_on_gpu, ms),
    ["Key Node", a.key_node || "(default)"], ["Iteration Method", a.iteration_method],
    [`Throughput (${tp.unit}/s)`, tp.samples_per_s === null ? null : tp.samples_per_s.toFixed(1), TIPS.throughput],
    ["Reader Cost (ms per iteration)", ms(tp.reader_cost_ns), TIPS.reader],
    ["Reader Cost / Batch Cost (%)", tp.reader_cost_ratio === null ? null : (tp.reader_cost_ratio * 100).toFixed(1), TIPS.reader_ratio],
    ["Model FLOPs per Iteration (GFLOP)", a.model_flops_per_iteration === null ? null : (a.model_flops_per_iteration / 1e9).toFixed(3), TIPS.model_flops],
    [`MFU (%)${a.mfu_precision ? ` · ${a.mfu_precision.toUpperCase()} dense peak` : ""}`, noted(a.mfu === null ? null : `${notes.mfu_lower_bound ? "≥ " : ""}${(a.mfu * 100).toFixed(1)}`, notes.mfu_note, "mfu-na"), TIPS.mfu],
  ]), el("p", { class: "hint", "data-testid": "summary-raw", text: "" })));

  // Model summary (seed 000: DLProf's op nodes and Tensor Core eligibility)
  const share = a.tc_eligible_gpu_time_pct;
  grid.append(panel(`Model Summary${of}`, "p-model", kv([
    ["Op Nodes", a.op_nodes, TIPS.op_nodes],
    ["TC Eligible Op Nodes", a.tc_eligible_op_nodes, TIPS.tc_eligible_op_nodes],
    ["Op Nodes Using TC", a.op_nodes_using_tc, TIPS.op_nodes_using_tc],
    ["GPU Time in TC Eligible Op Nodes (%)", share === null || share === undefined ? null : share.toFixed(1), TIPS.tc_eligible_share],
  ]), notes.model_summary_note ? el("p", { class: "hint", "data-testid": "model-note", text: `${notes.model_summary_note[0].toUpperCase()}${notes.model_summary_note.slice(1)}.` }) : null));

  // Iteration summary
  const itBox = el("div", { class: "chart wide" });
  grid.append(panel(`Iteration Summary${of}`, "p-iters wide", itBox, el("a", { class: "more", href: viewUrl("iterations"), text: "Open the Iterations view →" })));
  if (d.iterations.rows.length) charts.push(() => {
    const ic = iterationChart(itBox, d.iterations, { interactive: false });
    const at = d.iterations.columns.indexOf("iteration");  // a click on a bar opens the timeline at that iteration
    ic.chart.on("click", (p) => { location.href = viewUrl("timeline", { iteration: d.iterations.rows[p.dataIndex][at], rank: d.iterations.rank }); });
    return ic;
  });
  else itBox.replaceWith(el("p", { class: "na", text: "No iterations were found in this profile." }));

  // Expert systems
  const anchored = new Set();
  const rows = d.findings.map((f) => {
    const links = f.links || {};
    const drill = Object.keys(links).length ? el("a", { class: "drill", href: viewUrl("finding", { finding: f.finding_id }), title: "Show the ops, kernels or iterations concerned", text: "»" }) : null;
    const saving = f.est_saving_ns ? el("div", { class: "saving", title: exactNs(f.est_saving_ns), text: `Estimated saving: ${ns(f.est_saving_ns)}${f.est_saving_pct !== null ? ` (${f.est_saving_pct.toFixed(1)} %)` : ""}` }) : null;
    const unpriced = !f.est_saving_ns && f.not_priced ? el("div", { class: "saving not-priced", "data-testid": "finding-not-priced", text: `No time saving: ${f.not_priced}` }) : null;
    const when = (links.time_ranges || [])[0];
    const tl = when ? el("a", { class: "drill timeline-link", href: viewUrl("timeline", { rank: shownRank(), start: when[0], end: when[1] }), title: "Open the timeline at this finding's first evidence time range", "data-testid": "finding-timeline", text: "⏱" }) : null;
    const simulated = f.simulated_saving_ns !== null && f.simulated_saving_ns !== undefined
      ? el("div", { class: "simulated", "data-ns": String(f.simulated_saving_ns), title: `${exactNs(f.simulated_saving_ns)}: the advice replayed on the dependency graph (dlscope whatif)`, text: `Simulated saving: ${ns(f.simulated_saving_ns)}` }) : null;
    // a symptom whose cause has its own finding: a link to that finding's row, which says what to change
    const see = (f.see_findings || []).filter((rule) => d.findings.some((g) => g.rule === rule)).map((rule) =>
      el("a", { class: "see-finding", href: `#finding-${rule}`, "data-testid": "see-finding", text: `→ ${rule}` }));
    const anchor = f.rule && !anchored.has(f.rule) ? `finding-${f.rule}` : null;  // a rule's first finding
    anchored.add(f.rule);
    return el("tr", { class: `sev-${f.severity || "info"}`, id: anchor }, el("td", { class: "drill-cell" }, drill, tl),
      el("td", {}, el("span", { class: "rule", text: f.rule || "" }), el("div", { text: f.problem || "" }), saving, unpriced, simulated),
      el("td", {}, linkify(f.recommendation), ...see));
  });
  const combinedNs = d.findings_combined_saving_ns;
  const combined = combinedNs !== null && combinedNs !== undefined
    ? el("p", { class: "combined-saving", "data-ns": String(combinedNs), title: `${exactNs(combinedNs)}: all findings whose advice a scenario models, replayed together` }, `Combined saving (simulated, overlaps counted once): ${ns(combinedNs)}`) : null;
  grid.append(panel(`Expert Systems${of}`, "p-experts wide", combined, d.findings.length
    ? el("table", { class: "grid experts" }, el("thead", {}, el("tr", {}, el("th", { text: "" }), el("th", { text: "Problem" }), el("th", { text: "Recommendation" }))), el("tbody", {}, rows))
    : el("p", { class: "ok", text: "No issues were detected in this aggregation." })));

  // Top 10 GPU ops
  const hasDir = d.top_ops.some((o) => o.direction);
  const top = el("table", { class: "grid top-ops" },
    el("thead", {}, el("tr", {}, ["GPU Time", "Op Name", hasDir ? "Direction" : null, "Op Type", "Calls", "TC Eligible", "Using TC"].filter(Boolean).map((h) => el("th", { text: h })))),
    el("tbody", {}, d.top_ops.map((o) => el("tr", {},
      el("td", { class: "num" }, nsSpan(o.gpu_time_ns)),
      el("td", {}, el("a", { href: viewUrl("ops-kernels", { node: o.node_id }), title: o.op_name, text: o.op_name }),
        o.shapes ? el("div", { class: "hint shapes", "data-testid": "top-op-shapes", text: o.shapes }) : null),
      hasDir ? el("td", { text: o.direction || "" }) : null,
      el("td", { text: o.op_type || "" }), el("td", { class: "num", text: int(o.calls) }),
      el("td", {}, boolMark(o.tc_eligible)), el("td", {}, boolMark(o.using_tc))))));
  grid.append(panel(`Top 10 GPU Ops${of}`, "p-top wide", d.top_ops.length ? top : el("p", { class: "na", text: "No ops ran on the GPU." })));

  // System configuration
  grid.append(panel("System Configuration", "p-system", kv(d.system.map(([k2, v]) => [k2, v]))));

  // Guidance
  grid.append(panel("Guidance", "p-guidance", el("ul", {}, GUIDANCE.map(([t, url]) => el("li", {}, t, url ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: url }) : null)))));

  requestAnimationFrame(() => { charts.forEach((f) => f()); document.body.dataset.ready = "1"; });
  if (get("details") === "kernels") showDetails(k);
}
