// Re-aggregation notices: "Underway!" while the background job runs, then "Success!" (or the failure).

import { el } from "./format.mjs";
import { pageScope } from "./state.mjs";

const KEY = "dlscope.job";

function banner(kind, title, text, extra) {
  const host = document.getElementById("banners");
  host.querySelectorAll(".job-banner").forEach((b) => b.remove());
  host.append(el("div", { class: `banner job-banner ${kind}`, role: "status", "data-testid": `job-${kind}` },
    el("b", { text: title }), " ", text, extra || null,
    kind !== "underway" ? el("button", { class: "close", type: "button", "aria-label": "Dismiss", text: "✕", onclick: (e) => { e.target.parentElement.remove(); sessionStorage.removeItem(KEY); } }) : null));
}

export async function startJob(body) {
  const db = pageScope().db || "0";
  const res = await fetch(`/api/aggregate?db=${encodeURIComponent(db)}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const job = await res.json();
  if (!res.ok) { banner("failed", "Cannot reaggregate:", job.error || `HTTP ${res.status}`); return; }
  sessionStorage.setItem(KEY, String(job.id));
  poll(job.id);
}

export function resumeJob() {
  const id = sessionStorage.getItem(KEY);
  if (id) poll(id);
}

async function poll(id) {
  banner("underway", "Underway!", "Re-aggregating the profile in the background; keep using the viewer.");
  for (;;) {
    const res = await fetch(`/api/jobs/${id}`);
    if (!res.ok) { sessionStorage.removeItem(KEY); document.querySelectorAll(".job-banner").forEach((b) => b.remove()); return; }
    const job = await res.json();
    if (job.state === "success") {
      banner("success", "Success!", "The new aggregation is ready. ", el("a", { href: "#", text: "Reload to see it", onclick: (e) => { e.preventDefault(); sessionStorage.removeItem(KEY); const p = new URLSearchParams(location.search); p.delete("agg"); location.search = p.toString(); } }));
      return;
    }
    if (job.state === "failed") { banner("failed", "Re-aggregation failed:", job.message || ""); sessionStorage.removeItem(KEY); return; }
    await new Promise((r) => setTimeout(r, 700));
  }
}
