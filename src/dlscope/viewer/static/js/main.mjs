// Boot: navigation bar (view, aggregation, profile), banners, and the router drawing the current view.

import { boot, params, update, viewUrl, getJSON, shownAggregation, rankTitle, markShown, isShown } from "./state.mjs";
import { el } from "./format.mjs";
import { resumeJob } from "./jobs.mjs";

const RENDER = {
  "dashboard": async (c, d) => (await import("./dashboard.mjs")).renderDashboard(c, d),
  "op-types": async (c) => (await import("./views.mjs")).renderOpTypes(c),
  "group-ops": async (c, d, r) => (await import("./views.mjs")).renderGroups(c, r),
  "ops-kernels": async (c, d, r) => (await import("./views.mjs")).renderOpsKernels(c, r),
  "kernels-by-iteration": async (c, d, r) => (await import("./views.mjs")).renderKernelsByIteration(c, r),
  "kernels-by-op": async (c, d, r) => (await import("./views.mjs")).renderKernelsByOp(c, r),
  "iterations": async (c, d, r) => (await import("./iterations.mjs")).renderIterations(c, d, r),
  "gpus": async (c, d) => (await import("./views.mjs")).renderGpus(c, d),
  "ranks": async (c, d, r) => (await import("./job.mjs")).renderRanks(c, d, r),
  "collectives": async (c, d, r) => (await import("./job.mjs")).renderCollectives(c, d, r),
  "kernels": async (c) => (await import("./views.mjs")).renderAllKernels(c),
  "finding": async (c, d) => (await import("./views.mjs")).renderFinding(c, d),
  "roofline": async (c, d) => (await import("./roofline.mjs")).renderRoofline(c, d),
  "compare": async (c, d, r) => (await import("./compare.mjs")).renderCompare(c, d, r),
  "timeline": async (c, d) => (await import("./timeline.mjs")).renderTimeline(c, d),
  "python": async (c, d) => (await import("./python.mjs")).renderPython(c, d),
};

function aggLabel(a) {
  const range = a.iter_start === null || a.iter_start === undefined ? "all iterations" : `${a.iter_start} to ${a.iter_stop}`;
  return `${range}${a.key_node ? ` · key node ${a.key_node}` : ""}`;
}

function go(agg) {
  const p = new URLSearchParams();
  if (params().get("db")) p.set("db", params().get("db"));
  p.set("agg", agg);
  location.href = `${location.pathname}?${p}`;
}

function navbar() {
  const viewSel = document.getElementById("nav-view");
  for (const v of boot.views) if (v.menu || v.slug === boot.view) viewSel.append(el("option", { value: v.slug, selected: v.slug === boot.view, text: v.title }));
  viewSel.addEventListener("change", () => { location.href = viewUrl(viewSel.value); });
  const aggs = boot.aggregations || [];
  const shown = shownAggregation();
  // One entry per aggregation run (each run holds one aggregation per rank); the Rank menu picks the rank.
  const runKey = (a) => (a.run_id === null || a.run_id === undefined ? a.agg_id : a.run_id);
  const runs = new Map();
  for (const a of aggs) if (!runs.has(runKey(a))) runs.set(runKey(a), []);
  for (const a of aggs) runs.get(runKey(a)).push(a);
  if (runs.size > 1) {
    const sel = document.getElementById("nav-agg");
    for (const [key, members] of runs) {
      const pick = members.find((m) => shown && m.rank === shown.rank) || members[0];
      sel.append(el("option", { value: pick.agg_id, selected: shown && runKey(shown) === key, title: `created ${pick.created_at || ""}`, text: aggLabel(pick) }));
    }
    sel.addEventListener("change", () => go(sel.value));
    document.getElementById("nav-agg-wrap").hidden = false;
  }
  const run = boot.run || [];
  if (run.length > 1) {
    const sel = document.getElementById("nav-rank");
    for (const r of run) sel.append(el("option", { value: r.agg_id, selected: shown && shown.agg_id === r.agg_id, text: `rank ${r.rank}` }));
    sel.addEventListener("change", () => go(sel.value));
    document.getElementById("nav-rank-wrap").hidden = false;
  }
  if (boot.profiles.length > 1) {
    const sel = document.getElementById("nav-db");
    for (const p of boot.profiles) sel.append(el("option", { value: p.key, selected: p.key === boot.db, title: p.path, text: p.name }));
    sel.addEventListener("change", () => { location.href = `${location.pathname}?db=${encodeURIComponent(sel.value)}`; });
    document.getElementById("nav-db-wrap").hidden = false;
  }
  const title = rankTitle();
  document.getElementById("nav-profile").textContent = boot.profile_name + (title ? ` · ${title}` : "");
  document.getElementById("nav-profile").title = boot.profile_name + (title ? ` · ${title}` : "");
  if (title) document.title = `${document.title} · ${title}`;
  if (boot.notice) document.getElementById("banners").append(el("div", { class: "banner notice", role: "note" }, el("b", { text: "Note: " }), boot.notice));
}

let first = true;
async function render() {
  markShown();
  const content = document.getElementById("content");
  let data = boot.initial;
  if (!first) {
    try { data = await getJSON(`${location.pathname}?${params()}&_format=json`); } catch (err) {
      content.replaceChildren(el("section", { class: "panel error" }, el("h2", { text: "Cannot show this view" }), el("p", { text: err.message })));
      return;
    }
  }
  first = false;
  const scroll = window.scrollY;
  content.replaceChildren();
  document.body.dataset.ready = "";
  await RENDER[boot.view](content, data, render);
  if (!["dashboard", "iterations", "roofline", "compare", "gpus", "timeline", "python"].includes(boot.view)) document.body.dataset.ready = "1";
  window.scrollTo(0, scroll);
}

window.addEventListener("popstate", () => { if (!isShown()) render(); });  // a #fragment alone is an in-page jump
navbar();
render();
resumeJob();
void update;
