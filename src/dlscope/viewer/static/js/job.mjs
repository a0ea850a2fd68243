// The job of many ranks: the Ranks view (per rank: GPU utilization, compute / exposed communication / memcpy /
// idle, iteration time, straggler score) and the Collectives view (per collective call, then per rank).

import { dataTable } from "./table.mjs";
import { el, num, NA } from "./format.mjs";
import { pageScope, viewUrl, update, get, boot } from "./state.mjs";

function heading(content, title, hint) {
  content.append(el("div", { class: "view-head" }, el("h1", { text: title }), hint ? el("p", { class: "hint", text: hint }) : null));
}

const score = (v) => (v === null || v === undefined ? el("span", { class: "na", text: NA })
  : el("span", { class: v >= 0.5 ? "score high" : "score", title: String(v), text: num(v, 2) }));

/** The Ranks table of the page's aggregation run; a row opens that rank's dashboard. */
export function ranksTable(host, { title, hint, selected = null }) {
  return dataTable(host, { table: "ranks", prefix: "ranks", title, hint, rowKey: "rank", selected,
    scope: () => pageScope({ iteration: null, node: null, rank: null, finding: null }),
    onRowClick: (row) => { location.href = viewUrl("dashboard", { agg: row.agg_id }); },
    format: {
      rank: (v, row) => el("a", { href: viewUrl("dashboard", { agg: row.agg_id }), title: `Open rank ${v}'s dashboard`, text: `rank ${v}` }),
      straggler_score: score,
    } });
}

export function renderRanks(content) {
  const n = (boot.run || []).length;
  heading(content, `Ranks of the job (${n})`, "Each rank's GPU time inside its aggregation window, cut by priority so the parts add up to its wall clock: compute (a non-NCCL kernel runs) > exposed communication (only NCCL kernels run) > memcpy > idle. The straggler score (0..1) is how late the rank arrives at collectives on average, normalised per call: 1 = always last, the rank the others wait for. Click a rank to open its dashboard.");
  ranksTable(content, { title: "Ranks", hint: "Hidden columns (Columns menu): all communication, how much of it compute hides, collective count and bytes, bus bandwidth, lags." });
}

export function renderCollectives(content, data, rerender) {
  heading(content, "Collectives", "One row per collective call of the job, matched across ranks by type and occurrence, each rank's kernel counted inside its aggregation window. A collective ends together on every rank, so the rank that arrives last has the shortest kernel: its duration is the transfer itself, and its bandwidths are the call's. Arrival lag = the longest kernel of the call minus the rank's own (no common clock needed). Click a call to see every rank.");
  const call = get("call");
  dataTable(content, { table: "collective_calls", prefix: "calls", title: "Collective Calls", rowKey: "call_id", selected: call,
    scope: () => pageScope({ iteration: null, node: null, rank: null, call: null }),
    hint: "Click a call to see each rank's arrival, lag, duration and bandwidth.",
    onRowClick: (row) => { update({ call: row.call_id, "ranks.page": null }, true); rerender(); } });
  if (call) {
    const [, kind, index] = call.split("/");
    dataTable(content, { table: "collective_ranks", prefix: "ranks", title: `Ranks in ${kind} call ${index}`, rowKey: "collective_id",
      scope: () => pageScope({ iteration: null, node: null, rank: null }),
      hint: "Arrival: the kernel's start on the rank's clock; After the First Rank compares those clocks (ranks of one host share one); Arrival Lag needs no common clock." });
  } else {
    content.append(el("section", { class: "panel placeholder" }, el("h2", { text: "Ranks in the Selected Call" }), el("p", { class: "hint", text: "Click a call in the table above." })));
  }
}
