// The Python Call Stacks view: the Python call tree as an icicle (a flame graph hanging down), per thread or all,
// width = total time. Hover a box for its self and total time and file:line; click it to zoom in (the URL keeps
// the zoom), click the top bar to zoom out. Below: the ops the selected frame called, linked to the Timeline and to
// Ops and Kernels. Boxes are DOM elements with textContent: trace names never become HTML.

import { el, ns, exactNs, int } from "./format.mjs";
import { update, getJSON, query, pageScope, viewUrl } from "./state.mjs";

const ROW = 20;

function place(n) {
  if (!n.file) return "built-in";
  return n.line >= 0 ? `${n.file}:${n.line}` : n.file;
}

function describe(n) {
  return `${n.name}\n${place(n)}\ntotal ${ns(n.total_ns)} (${exactNs(n.total_ns)})\nself ${ns(n.self_ns)} (${exactNs(n.self_ns)})` +
    (n.calls === null || n.calls === undefined ? "" : `\ncalls ${int(n.calls)}`);
}

export function renderPython(content, data) {
  const py = data.python;
  content.append(el("div", { class: "view-head" }, el("h1", { text: "Python Call Stacks" }),
    el("p", { class: "hint", text: "Python frames merged by call path, per thread: a box's width is its total time (its frames' durations summed), what its children leave is its self time. Hover for file:line and times, click to zoom in, click the top bar to zoom out." })));
  if (!py.threads.length) {
    content.append(el("section", { class: "panel placeholder", "data-testid": "python-empty" },
      el("h2", { text: "No Python call stacks in this profile" }),
      el("p", { class: "hint", text: "Record them with `dlscope profile --with-stack` (torch.profiler with_stack=True), or open a cProfile output: `dlscope view run.prof`." })));
    document.body.dataset.ready = "1";
    return;
  }
  const notes = [];
  if (py.source === "cprofile") notes.push("From a cProfile output: no timeline, so each function's time is split among its callers in proportion to each caller's share (as snakeviz does); no ops were recorded.");
  if (py.frames && py.frames.dropped) notes.push(`${int(py.frames.dropped)} of ${int(py.frames.recorded)} frames were dropped at import (${py.frames.dropped_reason || "bounded"}).`);
  for (const n of notes) content.append(el("div", { class: "banner notice", role: "note", text: n }));
  const threadSel = el("select", { "aria-label": "Thread", "data-testid": "python-thread", onchange: (e) => {
    update({ thread: e.target.value === "all" ? null : e.target.value, frame: null, rank: null }, true);
    load();
  } }, el("option", { value: "all", text: "All threads" }),
  py.threads.map((t) => el("option", { value: t.key, selected: t.key === py.thread,
    text: t.pid < 0 && t.tid < 0 ? `cProfile (${ns(t.total_ns)})` : `rank ${t.rank} · pid ${t.pid} · thread ${t.tid} (${ns(t.total_ns)})` })));
  const detail = el("div", { class: "python-detail", "data-testid": "python-detail" });
  const graph = el("div", { class: "flame", "data-testid": "flame" });
  const opsBox = el("section", { class: "panel", "data-testid": "python-ops" });
  const status = el("p", { class: "hint", "data-testid": "python-status" });
  content.append(el("section", { class: "panel" }, el("div", { class: "panel-head" }, el("label", {}, "Thread ", threadSel), status), graph, detail), opsBox);

  let current = null;
  function showDetail(n, label) {
    detail.replaceChildren(el("b", { text: label }), " ",
      el("span", { class: "flame-name", "data-testid": "detail-name", text: n.name }),
      n.node_id === null ? "" : " · ", el("span", { "data-testid": "detail-place", text: n.node_id === null ? "" : place(n) }), " · total ",
      el("span", { class: "ns", "data-testid": "detail-total", title: exactNs(n.total_ns), "data-ns": String(n.total_ns), text: ns(n.total_ns) }),
      " · self ", el("span", { class: "ns", "data-testid": "detail-self", title: exactNs(n.self_ns), "data-ns": String(n.self_ns), text: ns(n.self_ns) }),
      n.calls === null || n.calls === undefined ? "" : ` · ${int(n.calls)} calls`);
  }

  async function showOps(n) {
    if (n.node_id === null) {
      opsBox.replaceChildren(el("h2", { text: "Ops called" }), el("p", { class: "hint",
        text: py.source === "cprofile" ? "A cProfile output records no ops." : "Click a frame to see the ops it called." }));
      return;
    }
    opsBox.replaceChildren(el("h2", { text: `Ops called by ${n.function || n.name}` }), el("p", { class: "hint", text: "Loading…" }));
    let res;
    try { res = await getJSON(`/api/python/ops?${query({ db: pageScope().db, rank: n.rank, node: n.node_id })}`); } catch (err) {
      opsBox.replaceChildren(el("h2", { text: "Ops called" }), el("p", { class: "error", text: err.message }));
      return;
    }
    if (!res.ops.length) {
      opsBox.replaceChildren(el("h2", { text: `Ops called by ${n.function || n.name}` }),
        el("p", { class: "hint", "data-testid": "python-no-ops", text: py.source === "cprofile" ? "A cProfile output records no ops." : "No op started directly in this frame (its callees' ops are listed under them)." }));
      return;
    }
    const rows = res.ops.map((o) => el("tr", {},
      el("td", { class: "text", text: o.name }),
      el("td", { class: "num", text: int(o.calls) }),
      el("td", { class: "num" }, el("span", { class: "ns", title: exactNs(o.cpu_time_ns), text: ns(o.cpu_time_ns) })),
      el("td", {}, el("a", { href: viewUrl("timeline", { op: o.first_op_id }), text: "first call on the Timeline" }),
        o.op_node ? " · " : "", o.op_node ? el("a", { href: viewUrl("ops-kernels", { node: o.op_node_id }), text: "Ops and Kernels" }) : "")));
    opsBox.replaceChildren(el("h2", { text: `Ops called by ${n.function || n.name}` }),
      el("p", { class: "hint", text: "Ops that started in this frame (not inside another op of it), summed per op; CPU time is the ops' own duration." + (res.truncated ? " The longest 200 are listed." : "") }),
      el("table", { class: "grid", "data-testid": "python-ops-table" },
        el("thead", {}, el("tr", {}, ["Op", "Calls", "CPU Time", ""].map((h) => el("th", { text: h })))), el("tbody", {}, rows)));
  }

  function draw(res) {
    const root = res.root;
    const byParent = new Map();
    for (const n of res.nodes) {
      const key = root.node_id !== null && n.parent_node_id === root.node_id ? "root" : (n.parent_node_id < 0 ? "root" : `${n.rank}:${n.parent_node_id}`);
      if (!byParent.has(key)) byParent.set(key, []);
      byParent.get(key).push(n);
    }
    const boxes = [];
    const total = root.total_ns || 1;
    let maxDepth = 0;
    const top = el("div", { class: "flame-box flame-root", role: "button", tabindex: 0, "data-testid": "flame-root",
      style: "left:0%;width:100%;top:0px", title: describe(root) }, el("span", { text: `${root.name} · ${ns(root.total_ns)}` }));
    top.addEventListener("click", () => {
      if (root.node_id !== null) { update({ frame: root.parent_node_id >= 0 ? root.parent_node_id : null, rank: root.parent_node_id >= 0 ? root.rank : null }, true); load(); }
    });
    top.addEventListener("mouseenter", () => showDetail(root, "Shown:"));
    boxes.push(top);
    const stack = [["root", 0, 1]];
    while (stack.length) {
      const [key, left, depth] = stack.pop();
      let x = left;
      for (const n of (byParent.get(key) || []).sort((a, b) => b.total_ns - a.total_ns)) {
        const w = n.total_ns / total;
        maxDepth = Math.max(maxDepth, depth);
        const box = el("div", { class: "flame-box", role: "button", tabindex: 0, "data-node": `${n.rank}:${n.node_id}`,
          "data-total-ns": String(n.total_ns), "data-self-ns": String(n.self_ns), title: describe(n),
          style: `left:${(x * 100).toFixed(4)}%;width:${(w * 100).toFixed(4)}%;top:${depth * ROW}px` },
        el("span", { text: n.function || n.name }));
        box.addEventListener("mouseenter", () => showDetail(n, "Hover:"));
        box.addEventListener("mouseleave", () => showDetail(current, "Shown:"));
        box.addEventListener("click", () => { update({ frame: n.node_id, rank: n.rank }, true); load(); });
        box.addEventListener("keydown", (e) => { if (e.key === "Enter") box.click(); });
        boxes.push(box);
        stack.push([`${n.rank}:${n.node_id}`, x, depth + 1]);
        x += w;
      }
    }
    graph.style.height = `${(maxDepth + 1) * ROW + 4}px`;
    graph.replaceChildren(...boxes);
    current = root;
    showDetail(root, "Shown:");
    status.textContent = `${int(res.nodes.length)} frames shown` + (res.truncated ? " (the largest; zoom in for more)" : "") +
      (res.min_ns > 1 ? ` · boxes under ${ns(res.min_ns)} are left out (their time is in their parent)` : "");
    showOps(root);
  }

  async function load() {
    const p = new URLSearchParams(location.search);
    const frame = p.get("frame"), rank = p.get("rank"), thread = p.get("thread") || "all";
    threadSel.value = thread;
    status.textContent = "Loading…";
    document.body.dataset.ready = "";
    try {
      const res = await getJSON(`/api/python/tree?${query({ db: pageScope().db, thread, node: frame, rank: frame !== null ? (rank ?? "0") : null })}`);
      draw(res);
    } catch (err) {
      graph.replaceChildren(el("p", { class: "error", "data-testid": "python-error", text: err.message }));
    }
    document.body.dataset.ready = "1";
  }
  load();
}
