// The Timeline view: one rank's CPU threads (annotations, ops by depth, CUDA runtime calls) and GPUs (annotations,
// each stream's kernels and memory operations) on one canvas. The server sends the events at least a pixel wide and
// per-pixel sums for the rest (/api/timeline), so a window of millions of events draws as fast as a small one.
// Wheel zooms around the pointer, drag pans; the view redraws at once from what it has and refetches the window.
// Names are drawn with fillText on the canvas or set as textContent: trace names never become HTML.
// Memory: each device's allocated and reserved bytes are counter lanes at the head of its group, a step chart on
// one scale per device; per pixel column the server sends the max (with its time), min and last, so no peak is lost.

import { el, ns, exactNs, int, bytes } from "./format.mjs";
import { update, getJSON, query, pageScope, viewUrl } from "./state.mjs";

const ROW = 16, COUNTER = 40, GROUP = 20, LABEL = 220, AXIS = 26, MIN_SPAN = 100;
const COLOR = { op: "#1e88e5", range: "#8e24aa", runtime: "#fb8c00", kernel: "#8bc34a", tc: "#2e7d32", memop: "#e53935",
  allocated: "#00897b", reserved: "#6d4c41" };
const laneHeight = (lane) => (lane.kind === "counter" ? COUNTER : ROW);
const NOUN = { kernel: ["kernel", "kernels"], memop: ["memory operation", "memory operations"], op: ["op", "ops"],
  range: ["annotation", "annotations"], runtime: ["runtime call", "runtime calls"] };

export function renderTimeline(content, data) {
  const t = data.timeline;
  const status = el("p", { class: "timeline-status", "data-testid": "timeline-status", text: "Loading the timeline…" });
  const canvas = el("canvas", { class: "timeline-canvas", "data-testid": "timeline-canvas", tabindex: 0,
    title: "Wheel or W/S: zoom · drag or A/D: pan" });
  const tip = el("div", { class: "timeline-tip", hidden: true, "data-testid": "timeline-tip" });
  const memory = el("ul", { class: "timeline-memory", "data-testid": "memory-in-view", hidden: true });
  const box = el("div", { class: "timeline-box" }, canvas, tip);
  // an iteration, or a range of them: "from" jumps to one, "through" extends the window to another's end
  let fromIt = null;
  const itOptions = (label) => [el("option", { value: "", text: label }),
    ...t.iterations.map((it, i) => el("option", { value: i, text: `iteration ${it.iteration}${it.profiled ? "" : " (outside the aggregation)"}` }))];
  const iterSel = t.iterations.length ? el("span", { class: "iter-range" },
    el("select", { "aria-label": "Go to iteration", "data-testid": "iteration-from", onchange: (e) => {
      fromIt = t.iterations[Number(e.target.value)] || null;
      if (fromIt) setAbsolute(fromIt.start, fromIt.end);
    } }, itOptions("Go to iteration…")),
    el("select", { "aria-label": "Through iteration", "data-testid": "iteration-to", onchange: (e) => {
      const to = t.iterations[Number(e.target.value)];
      const from = fromIt || to;
      if (to && BigInt(to.end) > BigInt(from.start)) setAbsolute(from.start, to.end);
    } }, itOptions("…through iteration"))) : null;
  const rankSel = t.ranks.length > 1 ? el("label", {}, "Rank ", el("select", { "aria-label": "Rank",
    onchange: (e) => { location.href = viewUrl("timeline", { rank: e.target.value }); } },
  t.ranks.map((r) => el("option", { value: r, selected: r === t.rank, text: String(r) })))) : null;
  content.append(el("div", { class: "view-head" }, el("h1", { text: "Timeline" }),
    el("p", { class: "hint", text: "Mouse wheel (or W/S) zooms around the pointer, drag (or A/D) pans. Hover a kernel to see the runtime call that launched it; click any event for its details. Shaded columns sum what is narrower than a pixel." })),
  el("section", { class: "panel timeline-panel" },
    el("div", { class: "toolbar" },
      el("button", { class: "btn", type: "button", text: "−", title: "Zoom out", "data-testid": "zoom-out", onclick: () => api.zoom(2) }),
      el("button", { class: "btn", type: "button", text: "+", title: "Zoom in", "data-testid": "zoom-in", onclick: () => api.zoom(0.5) }),
      el("button", { class: "btn", type: "button", text: "◀", title: "Pan left", onclick: () => api.pan(-0.5) }),
      el("button", { class: "btn", type: "button", text: "▶", title: "Pan right", onclick: () => api.pan(0.5) }),
      el("button", { class: "btn", type: "button", text: "Whole rank", onclick: () => data0 && api.setWindow(data0.extent.start, data0.extent.end) }),
      iterSel, rankSel, el("span", { class: "spacer" })),
    status, memory, box));

  let data0 = null;          // the latest response
  let vs = 0, ve = 1;        // the window shown, ns relative to the rank's origin
  let origin = null;         // BigInt: the rank's first event (absolute ns)
  let hover = null, seq = 0, controller = null, timer = null, waiting = [];
  const lanesY = new Map();
  let height = AXIS;
  const api = { paints: 0, lastFetchMs: null, lastPaintMs: null, zoom, pan, setWindow, where, wherePeak,
    counts: () => data0 && data0.counts, window: () => data0 && { start: data0.start, end: data0.end } };
  window.dlscopeTimeline = api;  // the benchmark and tests drive and read the view from here

  const plotW = () => Math.max(50, canvas.clientWidth - LABEL);

  function layout(lanes) {
    lanesY.clear();
    let y = AXIS, group = null;
    for (const lane of lanes) {
      if (lane.group !== group) { group = lane.group; y += GROUP; }
      lanesY.set(lane.id, y);
      y += laneHeight(lane);
    }
    height = y + 4;
    canvas.style.height = `${height}px`;
  }

  function absolute(rel) { return (origin + BigInt(Math.round(rel))).toString(); }

  async function fetchWindow() {
    const mine = ++seq;
    if (controller) controller.abort();
    controller = new AbortController();
    const started = performance.now();
    const q = { ...pageScope({ node: null, iteration: null, finding: null }), rank: t.rank, width: plotW() };
    if (origin === null) { q.start = t.start; q.end = t.end; } else { q.start = absolute(vs); q.end = absolute(Math.max(ve, vs + 1)); }
    let d;
    try {
      const res = await fetch(`/api/timeline?${query(q)}`, { signal: controller.signal, headers: { Accept: "application/json" } });
      d = await res.json();
      if (!res.ok) throw new Error(d.error || `HTTP ${res.status}`);
    } catch (err) {
      if (err.name === "AbortError") return;
      status.textContent = `Cannot show this window: ${err.message}`;
      document.body.dataset.ready = "1";
      const failed = waiting; waiting = [];
      failed.forEach((f) => f());
      return;
    }
    if (mine !== seq) return;
    api.lastFetchMs = performance.now() - started;
    if (origin === null) { origin = BigInt(d.origin); layout(d.lanes); }
    data0 = d;
    vs = d.start_rel; ve = d.end_rel;
    const p0 = performance.now();
    draw();
    api.lastPaintMs = performance.now() - p0;
    api.paints += 1;
    if (api.firstPaintAt === undefined) api.firstPaintAt = performance.now();  // ms since navigation start
    showStatus(d);
    showMemory(d);
    update({ start: d.start, end: d.end, kernel: null, op: null, node: null, kernel_name: null, iteration: null });
    document.body.dataset.ready = "1";
    const done = waiting; waiting = [];
    done.forEach((f) => f());
  }

  function refetch(delay) {
    clearTimeout(timer);
    const p = new Promise((resolve) => waiting.push(resolve));
    timer = setTimeout(fetchWindow, delay);
    return p;
  }

  function showStatus(d) {
    const c = d.counts;
    const parts = ["kernel", "memop", "op", "range", "runtime"].map((k) => `${int(c[k])} ${NOUN[k][c[k] === 1 ? 0 : 1]}`);
    const drawn = Object.values(d.shown).reduce((a, b) => a + b, 0);
    const total = Object.values(c).reduce((a, b) => a + b, 0);
    status.replaceChildren(el("b", { "data-testid": "kernels-in-view", "data-kernels": c.kernel, text: `${int(c.kernel)} kernels in view` }),
      ` · ${parts.slice(1).join(" · ")} · window ${ns(d.end_rel - d.start_rel)} (rank ${d.rank}, ${d.start} to ${d.end} ns) · `,
      `${int(drawn)} drawn one by one, ${int(total - drawn)} summed per pixel`);
    status.title = `window from ${exactNs(d.start_rel)} to ${exactNs(d.end_rel)} after the rank's first event`;
  }

  /** The largest allocated / reserved value of each memory lane in the window (the value carried in included). */
  function peaks(d) {
    const out = [];
    for (const lane of d.lanes) {
      const c = lane.kind === "counter" && d.data[String(lane.id)] && d.data[String(lane.id)].counter;
      if (!c) continue;
      let top = c.before, at = null, col = null;
      for (let i = 0; i < c.col.length; i++) if (top === null || c.max[i] > top) { top = c.max[i]; at = c.max_at[i]; col = c.col[i]; }
      if (top !== null) out.push({ lane, top, at, col });
    }
    return out;
  }

  function showMemory(d) {
    const found = peaks(d);
    memory.hidden = !found.length;
    memory.replaceChildren(...found.map(({ lane, top, at }) => el("li", { "data-testid": "memory-peak-in-view",
      "data-device": lane.device, "data-counter": lane.counter, "data-bytes": top,
      title: `${int(top)} bytes`,
      text: `${lane.group}: ${lane.counter} peaks at ${bytes(top)} in this window${at === null ? " (held since before it)" : ` at ${exactNs(at - d.extent.start)} in`}${lane.basis === "deltas" ? " (summed from the trace's start)" : ""}` })));
  }

  function zoom(factor, anchor = 0.5) {
    const span = ve - vs, at = vs + span * anchor;
    const next = Math.max(MIN_SPAN, span * factor);
    vs = at - (at - vs) * (next / span); ve = vs + next;
    draw();
    return refetch(0);
  }

  function pan(fraction) {
    const shift = (ve - vs) * fraction;
    vs += shift; ve += shift;
    draw();
    return refetch(0);
  }

  function setWindow(a, b) { vs = a; ve = Math.max(b, a + MIN_SPAN); draw(); return refetch(0); }

  function setAbsolute(a, b) {
    if (origin === null) return;
    setWindow(Number(BigInt(a) - origin), Number(BigInt(b) - origin));
  }

  /** Where an event sent one by one is drawn ({x, y} in CSS pixels of the canvas), or null. */
  function where(kind, id) {
    if (!data0) return null;
    for (const lane of data0.lanes) {
      const cell = data0.data[String(lane.id)];
      if (lane.kind !== kind || !cell || !cell.events.id) continue;
      const i = cell.events.id.indexOf(id);
      if (i < 0) continue;
      const w = plotW(), x0 = Math.max(LABEL, xOf(cell.events.start[i], w)), x1 = Math.min(LABEL + w, xOf(cell.events.end[i], w));
      return { x: (x0 + Math.max(x0 + 1, x1)) / 2, y: lanesY.get(lane.id) + ROW / 2 };
    }
    return null;
  }

  /** Where a memory lane's peak in the window is drawn ({x, y} in CSS pixels of the canvas), or null. */
  function wherePeak(device, counter) {
    if (!data0) return null;
    const p = peaks(data0).find((q) => q.lane.device === device && q.lane.counter === counter && q.at !== null);
    if (!p) return null;  // the left edge of the peak's pixel column, a third of a pixel in
    return { x: xOf(data0.start_rel + p.col * data0.ns_per_px, plotW()) + 0.3, y: lanesY.get(p.lane.id) + COUNTER / 2,
      bytes: p.top, at: p.at };
  }

  const xOf = (rel, w) => LABEL + ((rel - vs) / (ve - vs)) * w;

  function draw() {
    const dpr = window.devicePixelRatio || 1;
    const cssW = canvas.clientWidth || 1200;
    canvas.width = Math.round(cssW * dpr); canvas.height = Math.round(height * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssW, height);
    if (!data0) return;
    const w = cssW - LABEL;
    drawAxis(ctx, w);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    let group = null;
    for (const lane of data0.lanes) {
      const y = lanesY.get(lane.id);
      if (lane.group !== group) {
        group = lane.group;
        ctx.fillStyle = "#eceff1"; ctx.fillRect(0, y - GROUP, cssW, GROUP);
        ctx.fillStyle = "#263238"; ctx.font = "bold 11px system-ui, sans-serif";
        ctx.fillText(group, 6, y - GROUP / 2);
        ctx.font = "11px system-ui, sans-serif";
      }
      ctx.fillStyle = "#546e7a";
      const lh = laneHeight(lane);
      ctx.fillText(lane.label, 14, y + lh / 2, LABEL - 20);
      if (lane.kind === "counter") {
        ctx.fillStyle = "#90a4ae"; ctx.font = "10px system-ui, sans-serif";
        ctx.fillText(`0 – ${bytes(lane.scale_max)}`, 14, y + lh / 2 + 11, LABEL - 20);
        ctx.font = "11px system-ui, sans-serif";
      }
      const cell = data0.data[String(lane.id)];
      if (!cell) continue;
      ctx.save();
      ctx.beginPath(); ctx.rect(LABEL, y, w, lh); ctx.clip();
      if (cell.counter) drawCounter(ctx, lane, cell.counter, y, w);
      if (cell.buckets) drawBuckets(ctx, lane, cell.buckets, y, w);
      if (cell.events.id) drawEvents(ctx, lane, cell.events, y, w);
      ctx.restore();
    }
    if (hover) drawHover(ctx, w);
  }

  function drawAxis(ctx, w) {
    const span = ve - vs;
    const step = niceStep(span / Math.max(1, w / 110));
    ctx.fillStyle = "#455a64"; ctx.strokeStyle = "#cfd8dc"; ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "top";
    // the first tick says how far into the rank it is, the others how far after that tick
    const first = Math.ceil(vs / step) * step;
    for (let v = first; v <= ve; v += step) {
      const x = xOf(v, w);
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS - 6); ctx.lineTo(x + 0.5, height); ctx.stroke();
      ctx.fillText(v === first ? `${exactNs(v - data0.extent.start)} in` : `+${ns(v - first)}`, x + 3, 4);
    }
    ctx.fillText("time since the rank's first event", 6, 4);
  }

  function niceStep(raw) {
    const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function drawBuckets(ctx, lane, b, y, w) {
    const npp = data0.ns_per_px, base = data0.start_rel;
    const px = Math.max(1, (npp / (ve - vs)) * w);
    ctx.fillStyle = COLOR[lane.kind];
    ctx.globalAlpha = 0.55;
    for (let i = 0; i < b.col.length; i++) {
      const fill = Math.min(1, Math.max(0.25, b.busy[i] / npp));
      const h = (ROW - 2) * fill;
      ctx.fillRect(xOf(base + b.col[i] * npp, w), y + ROW - 1 - h, px, h);
    }
    ctx.globalAlpha = 1;
  }

  // A step chart: the level holds from a sample to the next; a column with samples is a bar to its max (its
  // min marked by the darker part), then the level goes on from the column's last value.
  function drawCounter(ctx, lane, c, y, w) {
    const npp = data0.ns_per_px, base = data0.start_rel;
    const px = Math.max(1, (npp / (ve - vs)) * w);
    const lo = Math.min(0, lane.scale_min), span = Math.max(1, lane.scale_max - lo);
    const yOf = (v) => y + COUNTER - 2 - ((v - lo) / span) * (COUNTER - 6);
    const y0 = yOf(0);
    ctx.fillStyle = COLOR[lane.counter] || COLOR.allocated;
    let level = c.before, x = xOf(base, w);
    const hold = (to) => {
      if (level !== null && to > x) { const yl = yOf(level); ctx.fillRect(x, Math.min(yl, y0), to - x, Math.max(1, Math.abs(y0 - yl))); }
    };
    ctx.globalAlpha = 0.45;
    for (let i = 0; i < c.col.length; i++) {
      const xc = xOf(base + c.col[i] * npp, w);
      hold(xc);
      const top = yOf(c.max[i]);
      ctx.fillRect(xc, Math.min(top, y0), px, Math.max(1, Math.abs(y0 - top)));
      ctx.globalAlpha = 1;
      const bottom = yOf(c.min[i]);
      ctx.fillRect(xc, top, px, Math.max(1, bottom - top));
      ctx.globalAlpha = 0.45;
      level = c.last[i]; x = xc + px;
    }
    hold(xOf(data0.end_rel, w));
    ctx.globalAlpha = 1;
  }

  /** The tooltip of a memory lane at time ``at``: the column's max (and when), min and samples, else the level. */
  function counterTip(lane, c, at) {
    const npp = data0.ns_per_px, col = Math.floor((at - data0.start_rel) / npp + 1e-6);
    let lo = 0, hi = c.col.length;  // the last column with samples at or before the pointer's
    while (lo < hi) { const mid = (lo + hi) >> 1; if (c.col[mid] <= col) lo = mid + 1; else hi = mid; }
    const i = lo - 1, since = (t) => `${exactNs(t - data0.extent.start)} in`;
    const what = `${lane.group} ${lane.counter}`;
    if (i >= 0 && c.col[i] === col) {
      return c.max[i] === c.min[i] ? `${what}: ${bytes(c.max[i])} at ${since(c.max_at[i])}`
        : `${what}: max ${bytes(c.max[i])} at ${since(c.max_at[i])}, min ${bytes(c.min[i])} in this pixel`;
    }
    const level = i >= 0 ? c.last[i] : c.before;
    return level === null ? `${what}: no sample yet` : `${what}: ${bytes(level)} at ${since(at)}`;
  }

  function drawEvents(ctx, lane, e, y, w) {
    const focus = data.timeline.focus;
    for (let i = 0; i < e.id.length; i++) {
      const x0 = xOf(e.start[i], w), x1 = xOf(e.end[i], w);
      if (x1 < LABEL || x0 > LABEL + w) continue;
      const bw = Math.max(1, x1 - x0);
      ctx.fillStyle = lane.kind === "kernel" && e.tc[i] ? COLOR.tc : COLOR[lane.kind];
      ctx.fillRect(x0, y + 1, bw, ROW - 2);
      if (focus && focus.kind === lane.kind && focus.id === e.id[i]) {
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.strokeRect(x0 - 1, y, bw + 2, ROW); ctx.lineWidth = 1;
      }
      if (bw > 40) {
        ctx.fillStyle = "#fff";
        ctx.fillText(data0.names[e.name[i]], Math.max(x0, LABEL) + 3, y + ROW / 2, bw - 6);
      }
    }
  }

  function drawHover(ctx, w) {
    const { lane, e, i } = hover;
    const y = lanesY.get(lane.id);
    ctx.strokeStyle = "#000"; ctx.strokeRect(xOf(e.start[i], w) - 0.5, y + 0.5, Math.max(1, xOf(e.end[i], w) - xOf(e.start[i], w)) + 1, ROW - 1);
    if (!e.launch || e.launch[i] === null || e.launch_lane[i] === null) return;
    const ly = lanesY.get(e.launch_lane[i]) + ROW / 2, lx = xOf(e.launch[i], w);
    const kx = xOf(e.start[i], w), ky = y + ROW / 2;
    ctx.strokeStyle = "#d81b60"; ctx.lineWidth = 1.5; ctx.setLineDash([4, 3]);
    ctx.beginPath(); ctx.moveTo(lx, ly); ctx.lineTo(kx, ky); ctx.stroke();
    ctx.setLineDash([]); ctx.lineWidth = 1; ctx.fillStyle = "#d81b60";
    ctx.beginPath(); ctx.arc(lx, ly, 3, 0, 2 * Math.PI); ctx.fill();
    ctx.beginPath(); ctx.arc(kx, ky, 3, 0, 2 * Math.PI); ctx.fill();
  }

  function hit(mx, my) {
    if (!data0 || mx < LABEL) return null;
    const w = plotW();
    for (const lane of data0.lanes) {
      const y = lanesY.get(lane.id);
      if (my < y || my >= y + laneHeight(lane)) continue;
      const cell = data0.data[String(lane.id)];
      const at = vs + ((mx - LABEL) / w) * (ve - vs);
      if (lane.kind === "counter") return cell && cell.counter ? { lane, tip: counterTip(lane, cell.counter, at) } : null;
      if (!cell || !cell.events.id) return null;
      const e = cell.events, slack = (2 / w) * (ve - vs);
      let lo = 0, hi = e.start.length;  // the last event starting before the pointer (within 2 px)
      while (lo < hi) { const mid = (lo + hi) >> 1; if (e.start[mid] <= at + slack) lo = mid + 1; else hi = mid; }
      for (let i = lo - 1; i >= 0 && i >= lo - 4; i--) if (e.end[i] + slack >= at) return { lane, e, i };
      return null;
    }
    return null;
  }

  let drag = null;
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = canvas.getBoundingClientRect();
    const anchor = Math.min(1, Math.max(0, (ev.clientX - r.left - LABEL) / plotW()));
    const span = ve - vs, at = vs + span * anchor, next = Math.max(MIN_SPAN, span * (ev.deltaY > 0 ? 1.25 : 0.8));
    vs = at - (at - vs) * (next / span); ve = vs + next;
    draw();
    refetch(60);
  }, { passive: false });
  canvas.addEventListener("keydown", (ev) => {  // W/S zoom in/out, A/D pan, as in chrome://tracing and Perfetto
    const act = { w: () => zoom(0.8), s: () => zoom(1.25), a: () => pan(-0.2), d: () => pan(0.2) }[ev.key.toLowerCase()];
    if (act && !ev.ctrlKey && !ev.metaKey && !ev.altKey) { ev.preventDefault(); act(); }
  });
  canvas.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, vs, ve, moved: false }; });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const wasDrag = drag.moved;
    drag = null;
    if (wasDrag) { refetch(0); return; }
    const r = canvas.getBoundingClientRect();
    const h = hit(ev.clientX - r.left, ev.clientY - r.top);
    if (h && h.e) showDetails(h.lane.kind, h.e.id[h.i]);
  });
  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    if (drag) {
      const dx = ev.clientX - drag.x;
      if (Math.abs(dx) > 2) drag.moved = true;
      const shift = (dx / plotW()) * (drag.ve - drag.vs);
      vs = drag.vs - shift; ve = drag.ve - shift;
      draw();
      return;
    }
    let h = hit(ev.clientX - r.left, ev.clientY - r.top);
    const text = h && (h.tip || `${data0.names[h.e.name[h.i]]} · ${ns(h.e.end[h.i] - h.e.start[h.i])}`);
    if (h && h.tip) h = null;  // a memory lane: a tooltip, no event to outline
    const changed = (h && h.e.id[h.i]) !== (hover && hover.e.id[hover.i]);
    hover = h;
    if (changed) draw();
    if (text) {
      tip.hidden = false;
      tip.textContent = text;
      tip.style.left = `${Math.min(ev.clientX - r.left + 12, canvas.clientWidth - 260)}px`;
      tip.style.top = `${ev.clientY - r.top + 14}px`;
    } else tip.hidden = true;
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; if (hover) { hover = null; draw(); } });
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(() => { if (data0) { draw(); refetch(150); } }).observe(box);

  async function showDetails(kind, id) {
    const pane = document.getElementById("details");
    pane.hidden = false;
    pane.replaceChildren(el("p", { class: "hint", text: "Loading…" }));
    let d;
    try { d = await getJSON(`/api/timeline/event?${query({ db: pageScope().db, kind, id })}`); } catch (err) {
      pane.replaceChildren(el("p", { class: "error", text: err.message }));
      return;
    }
    const rows = Object.entries(d).filter(([k, v]) => !["kind", "id"].includes(k) && v !== null && v !== "");
    const links = [];
    if (d.node_id !== undefined && d.node_id !== null) links.push(el("a", { href: viewUrl("ops-kernels", { node: d.node_id }), text: "This op node's kernels" }));
    pane.replaceChildren(el("div", { class: "kernel-details", "data-testid": "timeline-details" },
      el("div", { class: "details-head" }, el("h2", { text: `${NOUN[kind][0][0].toUpperCase()}${NOUN[kind][0].slice(1)} ${id}` }),
        el("button", { class: "close", type: "button", "aria-label": "Close", text: "✕", onclick: () => { pane.hidden = true; } })),
      el("dl", { class: "details-list" }, rows.flatMap(([k, v]) => [el("dt", { text: k.replace(/_/g, " ") }),
        el("dd", { text: ["start", "end", "launch_ts"].includes(k) ? String(v) : (["dur", "kernel_time", "gpu_time", "api_time"].includes(k) ? `${ns(v)} (${exactNs(v)})` : String(v)) })])),
      links));
  }

  requestAnimationFrame(() => fetchWindow());
}
