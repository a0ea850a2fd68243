// Boot: navigation bar (view, aggregation, profile), banners, and the router drawing the current view.

import { boot, params, update, viewUrl, getJSON } from "./state.mjs";
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
  "kernels": async (c) => (await import("./views.mjs")).renderAllKernels(c),
  "finding": async (c, d) => (await import("./views.mjs")).renderFinding(c, d),
  "roofline": async (c, d) => (await import("./roofline.mjs")).renderRoofline(c, d),
  "compare": async (c, d, r) => (await import("./compare.mjs")).renderCompare(c, d, r),
};

function aggLabel(a) {
  const range = a.iter_start === null || a.iter_start === undefined ? "all iterations" : `${a.iter_start} to ${a.iter_stop}`;
  return `${range}${a.rank !== null && a.rank !== undefined ? ` · rank ${a.rank}` : ""}`;
}

function navbar() {
  const viewSel = document.getElementById("nav-view");
  for (const v of boot.views) if (v.menu || v.slug === boot.view) viewSel.append(el("option", { value: v.slug, selected: v.slug === boot.view, text: v.title }));
  viewSel.addEventListener("change", () => { location.href = viewUrl(viewSel.value); });
  const aggs = boot.aggregations || [];
  const current = boot.initial && boot.initial.scope ? boot.initial.scope.agg : null;
  if (aggs.length > 1) {
    const sel = document.getElementById("nav-agg");
    for (const a of aggs) sel.append(el("option", { value: a.agg_id, selected: a.agg_id === current, title: `Key node: ${a.key_node || "(default)"} · created ${a.created_at || ""}`, text: aggLabel(a) }));
    sel.addEventListener("change", () => { const p = new URLSearchParams(); if (params().get("db")) p.set("db", params().get("db")); p.set("agg", sel.value); location.href = `${location.pathname}?${p}`; });
    document.getElementById("nav-agg-wrap").hidden = false;
  }
  if (boot.profiles.length > 1) {
    const sel = document.getElementById("nav-db");
    for (const p of boot.profiles) sel.append(el("option", { value: p.key, selected: p.key === boot.db, title: p.path, text: p.name }));
    sel.addEventListener("change", () => { location.href = `${location.pathname}?db=${encodeURIComponent(sel.value)}`; });
    document.getElementById("nav-db-wrap").hidden = false;
  }
  document.getElementById("nav-profile").textContent = boot.profile_name;
  if (boot.notice) document.getElementById("banners").append(el("div", { class: "banner notice", role: "note" }, el("b", { text: "Note: " }), boot.notice));
}

let first = true;
async function render() {
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
  if (!["dashboard", "iterations", "roofline", "compare"].includes(boot.view)) document.body.dataset.ready = "1";
  window.scrollTo(0, scroll);
}

window.addEventListener("popstate", () => render());
navbar();
render();
resumeJob();
void update;
