// Readable numbers and times; every cell is built as DOM text (never HTML), so trace names stay text.

const NS_UNITS = [[60e9, "min"], [1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
export const NA = "n/a";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function int(v) {
  return v === null || v === undefined ? NA : Number(v).toLocaleString("en-US", { maximumFractionDigits: 0 });
}

export function num(v, digits = 3) {
  if (v === null || v === undefined) return NA;
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits });
}

export function nsUnit(maxNs) {
  for (const [scale, unit] of NS_UNITS) if (Math.abs(maxNs) >= scale) return [scale, unit];
  return [1, "ns"];
}

export function ns(v) {
  if (v === null || v === undefined) return NA;
  const [scale, unit] = nsUnit(v);
  const x = v / scale;
  const digits = unit === "ns" ? 0 : Math.abs(x) >= 100 ? 1 : Math.abs(x) >= 10 ? 2 : 3;
  return `${x.toLocaleString("en-US", { maximumFractionDigits: digits })} ${unit}`;
}

export function exactNs(v) {
  return v === null || v === undefined ? "not measured" : `${int(Math.round(v))} ns`;
}

export function pct(v, digits = 1) {
  return v === null || v === undefined ? NA : `${(v * 100).toFixed(digits)} %`;
}

export function bytes(v) {
  if (v === null || v === undefined) return NA;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, x = Number(v);
  while (Math.abs(x) >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return `${x.toLocaleString("en-US", { maximumFractionDigits: i ? 1 : 0 })} ${units[i]}`;
}

/** A time as readable text with the exact nanoseconds on hover. */
export function nsSpan(v) {
  return el("span", { class: v === null || v === undefined ? "na" : "ns", title: exactNs(v), text: ns(v) });
}

export function boolMark(v) {
  if (v === null || v === undefined) return el("span", { class: "na", text: NA });
  return el("span", { class: v ? "yes" : "no", title: v ? "yes (1)" : "no (0)", text: v ? "✓" : "✗" });
}

/** Value with a progress meter showing its share of ``whole`` (Kernels by Iteration's GPU time cells). */
export function shareBar(v, whole) {
  const share = v !== null && v !== undefined && whole ? v / whole : null;
  return el("span", { class: "share", title: `${exactNs(v)}${share === null ? "" : ` = ${(share * 100).toFixed(3)} % of the iteration`}` },
    el("span", { class: "share-value", text: ns(v) }),
    el("span", { class: "meter" }, el("span", { class: "meter-fill", style: `width:${Math.min(100, (share || 0) * 100).toFixed(1)}%` })),
    el("span", { class: "share-pct", text: share === null ? NA : `${(share * 100).toFixed(1)} %` }));
}

export function longText(v, limit = 100) {
  if (v === null || v === undefined || v === "") return el("span", { class: "na", text: "" });
  const s = String(v);
  if (s.length <= limit) return el("span", { class: "text", title: s, text: s });
  const span = el("span", { class: "text long", title: s, text: s.slice(0, limit) + "…" });
  const more = el("a", { href: "#", class: "see-more", text: "See More" });
  more.addEventListener("click", (e) => {
    e.preventDefault(); e.stopPropagation();
    const open = more.textContent === "See More";
    span.textContent = open ? s : s.slice(0, limit) + "…";
    more.textContent = open ? "See Less" : "See More";
  });
  return el("span", {}, span, " ", more);
}

export function cellFor(kind, value, row) {
  switch (kind) {
    case "ns": return nsSpan(value);
    case "ts": return el("span", { class: value === null || value === undefined ? "na" : "ts", title: "timestamp in nanoseconds", text: int(value) });
    case "bool": return boolMark(value);
    case "pct": return el("span", { title: value === null || value === undefined ? "not measured" : `${(value * 100).toFixed(4)} %`, text: pct(value) });
    case "bytes": return el("span", { title: value === null || value === undefined ? "" : `${int(value)} bytes`, text: bytes(value) });
    case "text": return longText(value);
    case "float": return el("span", { text: num(value) });
    default: return el("span", { class: value === null || value === undefined ? "na" : "", text: int(value) });
  }
}
