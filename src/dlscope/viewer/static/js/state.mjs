// The URL is the state: view, aggregation, selections and every table's sort/filter/page live in it.

export const boot = JSON.parse(document.getElementById("boot").textContent);

export function params() { return new URLSearchParams(location.search); }

export function get(name) { return params().get(name); }

/** Update URL parameters (null removes); push a history entry for selections, replace for table tweaks. */
export function update(changes, push = false) {
  const p = params();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === "") p.delete(k); else p.set(k, String(v));
  }
  const url = `${location.pathname}?${p.toString()}`;
  if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
  markShown();
}

let shown = null;
/** The page (path and query) on screen: set by each render and each URL update, so that a history step that
 * changes only the #fragment (an in-page link) is told from one back to another page. */
export function markShown() { shown = location.pathname + location.search; }
export function isShown() { return shown === location.pathname + location.search; }

/** Parameters shared by every API call of this page (database, aggregation, selections). */
export function pageScope(extra = {}) {
  const p = params();
  const out = {};
  for (const k of ["db", "agg", "rank", "iteration", "node", "finding", "call"]) if (p.get(k) !== null) out[k] = p.get(k);
  return { ...out, ...extra };
}

export function viewUrl(slug, extra = {}) {
  const p = new URLSearchParams();
  const cur = params();
  for (const k of ["db", "agg"]) if (cur.get(k)) p.set(k, cur.get(k));
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) p.set(k, String(v));
  const q = p.toString();
  return `/${slug}${q ? "?" + q : ""}`;
}

export async function getJSON(url) {
  const res = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body;
}

export function query(obj) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(obj)) if (v !== null && v !== undefined && v !== "") p.set(k, String(v));
  return p.toString();
}

/** The aggregation shown (from the view's scope) and the run it belongs to (one aggregation per rank). */
export function shownAggregation() {
  const aggs = boot.aggregations || [];
  const current = boot.initial && boot.initial.scope ? boot.initial.scope.agg : null;
  return aggs.find((a) => a.agg_id === current) || null;
}

/** "job of 8 ranks · rank 3" for a job, "" for one rank. */
export function rankTitle() {
  const run = boot.run || [];
  const a = shownAggregation();
  return run.length > 1 ? `job of ${run.length} ranks${a ? ` · rank ${a.rank}` : ""}` : "";
}


/** The rank of the aggregation shown (null when there is none): where the timeline opens. */
export function shownRank() {
  const a = shownAggregation();
  return a ? a.rank : null;
}
