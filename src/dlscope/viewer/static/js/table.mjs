// A DLProf-style data table over Tabulator: the server sorts, filters, pages and exports (remote mode).

import { TabulatorFull as Tabulator } from "/static/vendor/tabulator_esm.min.mjs";
import { boot, params, update, query, getJSON, viewUrl } from "./state.mjs";
import { el, cellFor, int } from "./format.mjs";

const PAGE_SIZES = [10, 25, 50, 100];
const CLIPBOARD_MAX = 100000;

function headerPlaceholder(col) {
  if (col.kind === "bool") return "1 or 0";
  if (col.kind === "text") return `Search ${col.label}`;
  if (col.kind === "ns") return "e.g. >1ms";
  if (col.kind === "ts") return "e.g. >123456789";
  return "e.g. >10";
}

/**
 * Draw a table into ``host``. opts: table, prefix (URL prefix), title, hint, scope() -> params,
 * onRowClick(row), selected (row key), rowKey, show (column names to show), narrowed (huge table scoped),
 * format {column: fn(value,row)->Node}, rowClass(row) -> CSS class of a row (or "").
 */
export function dataTable(host, opts) {
  const meta = boot.tables[opts.table];
  const prefix = opts.prefix + ".";
  const p = params();
  const q0 = p.get(prefix + "q") || "";
  let lastResp = null;
  let lastQuery = {};

  const searched = (meta.searched || []).join(", ");
  const search = el("input", { type: "search", class: "global-search", value: q0, "aria-label": `Search ${opts.title}`,
    placeholder: meta.huge ? `Search ${searched || "names"}` : "Search all text columns",
    title: searched ? `Searches ${searched}${meta.huge ? " (the names of millions of events are matched through their distinct names; other text columns are searched with their own column filter within an iteration)" : ""}` : "" });
  const counterNote = el("span", { class: "count-note" });
  const exportLink = (fmt, label) => el("a", { class: "btn", href: "#", "data-export": fmt, text: label,
    onclick: (e) => { e.currentTarget.href = exportUrl(fmt); } });
  const copyBtn = el("button", { class: "btn", type: "button", text: "Clipboard", onclick: () => copyAll() });
  const colMenu = el("details", { class: "columns-menu" }, el("summary", { class: "btn", text: "Columns" }));
  const toolbar = el("div", { class: "toolbar" },
    el("span", { class: "export" }, "Export to: ", exportLink("xlsx", "Excel"), exportLink("pdf", "PDF"), exportLink("csv", "CSV"),
      exportLink("json", "JSON"), copyBtn),
    colMenu, el("span", { class: "spacer" }), el("label", { class: "search-label" }, "Search: ", search));
  const tableHost = el("div", { class: "table-host" });
  const section = el("section", { class: "panel table-panel", "data-table": opts.table, "data-prefix": opts.prefix },
    el("div", { class: "panel-head" }, el("h2", { text: opts.title }), opts.hint ? el("p", { class: "hint", text: opts.hint }) : null),
    toolbar, tableHost, counterNote);
  host.append(section);

  if (!meta.available) {
    tableHost.append(el("p", { class: "empty", text: "This database has no data for this table." }));
    return { section, reload() {} };
  }

  const shown = opts.show ? new Set(opts.show) : null;
  const columns = meta.columns.map((c) => ({
    title: c.label, field: c.name,
    visible: shown ? shown.has(c.name) : !c.hidden,
    headerSort: c.sortable && (!meta.huge || opts.narrowed || c.big_sort),
    headerSortStartingDir: c.desc_first ? "desc" : "asc",
    headerFilter: "input", headerFilterPlaceholder: headerPlaceholder(c),
    hozAlign: ["text", "bool"].includes(c.kind) ? "left" : "right",
    cssClass: `col-${c.kind}`,
    widthGrow: c.kind === "text" ? 3 : 1,
    maxWidth: c.kind === "text" ? 560 : undefined,
    formatter: (cell) => (opts.format && opts.format[c.name] ? opts.format[c.name](cell.getValue(), cell.getRow().getData())
      : cellFor(c.kind, cell.getValue(), cell.getRow().getData())),
  }));

  // Every kernel, op and iteration row opens the timeline at its place (the Compare view's rows are two runs').
  const names = new Set(meta.columns.map((c) => c.name));
  const target = opts.table.startsWith("compare_") ? null
    : names.has("kernel_id") ? (r) => ({ kernel: r.kernel_id })
      : names.has("kernel_name") ? (r) => ({ kernel_name: r.kernel_name })
        : names.has("node_id") ? (r) => (r.node_id === null || r.node_id === undefined ? null : { node: r.node_id })
          : opts.table === "iterations" ? (r) => ({ iteration: r.iteration, rank: r.rank }) : null;
  if (target) columns.push({ title: "", field: "_timeline", headerSort: false, hozAlign: "center", width: 40, frozen: true,
    formatter: (cell) => {
      const where = target(cell.getRow().getData());
      return where ? el("a", { class: "timeline-link", href: viewUrl("timeline", where), title: "Open the timeline here", "data-testid": "row-timeline", text: "⏱" }) : "";
    } });

  for (const c of meta.columns) {
    const box = el("input", { type: "checkbox", checked: shown ? shown.has(c.name) : !c.hidden,
      onchange: (e) => (e.target.checked ? table.showColumn(c.name) : table.hideColumn(c.name)) });
    colMenu.append(el("label", { class: "col-toggle" }, box, " ", c.label));
  }

  const sort = p.get(prefix + "sort") || meta.default_sort;
  const order = p.get(prefix + "order") || (sort === meta.default_sort ? meta.default_order
    : (meta.columns.find((c) => c.name === sort)?.desc_first ? "desc" : "asc"));
  const initialFilters = [];
  for (const [k, v] of p.entries()) if (k.startsWith(prefix + "f.")) initialFilters.push({ field: k.slice(prefix.length + 2), value: v });

  function currentParams(tabParams) {
    const out = { ...opts.scope() };
    const s = tabParams.sort && tabParams.sort[0];
    if (s) { out.sort = s.field; out.order = s.dir; }
    for (const f of tabParams.filter || []) out[`f.${f.field}`] = f.value;
    if (search.value.trim()) out.q = search.value.trim();
    return out;
  }

  /** Exports carry the profile name in their header (CSV, TSV and so the clipboard: a first title line). */
  function exportUrl(fmt) {
    const extra = fmt === "csv" || fmt === "tsv" ? { title: 1 } : {};
    return `/api/table/${opts.table}/export.${fmt}?${query({ ...lastQuery, ...extra })}`;
  }

  async function copyAll() {
    const total = lastResp ? lastResp.total : null;
    if (total === null || total > CLIPBOARD_MAX) {  // the clipboard gets the table with its title line
      flash(`Too many rows for the clipboard (${total === null ? "unknown count" : int(total)}); use CSV or Excel.`);
      return;
    }
    const res = await fetch(exportUrl("tsv"));
    const text = await res.text();
    try {
      await navigator.clipboard.writeText(text);
      flash(`Copied ${int(total)} rows to the clipboard.`);
    } catch (err) {
      flash(`The browser refused clipboard access (${err.message}).`);
    }
  }

  function flash(msg) {
    counterNote.textContent = msg;
    setTimeout(() => { if (counterNote.textContent === msg) counterNote.textContent = ""; }, 4000);
  }

  const table = new Tabulator(tableHost, {
    layout: "fitDataStretch",
    columns,
    index: opts.rowKey || meta.columns[0].name,
    ajaxURL: `/api/table/${opts.table}`,
    ajaxResponse: (url, tabParams, resp) => {
      lastResp = resp;
      const s = tabParams.sort && tabParams.sort[0];
      const changes = { [prefix + "page"]: tabParams.page > 1 ? tabParams.page : null,
        [prefix + "size"]: tabParams.size !== 10 ? tabParams.size : null,
        [prefix + "sort"]: s && s.field !== meta.default_sort ? s.field : null,
        [prefix + "order"]: s && !(s.field === meta.default_sort && s.dir === meta.default_order) ? s.dir : null,
        [prefix + "q"]: search.value.trim() || null };
      for (const k of params().keys()) if (k.startsWith(prefix + "f.")) changes[k] = null;
      for (const f of tabParams.filter || []) changes[prefix + "f." + f.field] = f.value;
      update(changes);
      return { last_page: resp.last_page, last_row: resp.total ?? undefined, data: resp.rows };
    },
    ajaxRequestFunc: async (url, config, tabParams) => {
      const q = currentParams(tabParams);
      lastQuery = { ...q };
      q.page = tabParams.page; q.size = tabParams.size;
      try { return await getJSON(`${url}?${query(q)}`); } catch (err) { showError(err.message); throw err; }
    },
    pagination: true, paginationMode: "remote", sortMode: "remote", filterMode: "remote",
    paginationSize: Number(p.get(prefix + "size")) || 10,
    paginationSizeSelector: PAGE_SIZES,
    paginationInitialPage: Number(p.get(prefix + "page")) || 1,
    paginationButtonCount: 5,
    paginationCounter: (pageSize, currentRow, currentPage, totalRows) => {
      if (!lastResp) return "";
      const first = lastResp.rows.length ? (lastResp.page - 1) * lastResp.size + 1 : 0;
      const last = first ? first + lastResp.rows.length - 1 : 0;
      const of = lastResp.total === null ? "many (counting took too long)" : int(lastResp.total);
      return `Showing ${int(first)} to ${int(last)} of ${of} entries`;
    },
    initialSort: [{ column: sort, dir: order }],
    initialHeaderFilter: initialFilters,
    headerFilterLiveFilterDelay: 450,
    headerSortElement: "<span class='sort-arrow'></span>",
    placeholder: opts.placeholder || "No matching rows",
    selectableRows: opts.onRowClick ? 1 : false,
    rowFormatter: opts.rowClass ? (row) => { const cls = opts.rowClass(row.getData()); if (cls) row.getElement().classList.add(cls); } : undefined,
  });

  function showError(msg) {
    counterNote.textContent = `Error: ${msg}`;
    counterNote.classList.add("error");
  }

  table.on("dataProcessed", () => {
    counterNote.classList.remove("error");
    if (opts.selected !== undefined && opts.selected !== null) {
      try { table.selectRow(opts.selected); } catch (e) { /* row not on this page */ }
    }
  });
  if (opts.onRowClick) table.on("rowClick", (e, row) => { if (e.target.closest("a, button")) return; opts.onRowClick(row.getData()); });

  let timer = null;
  search.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => table.setPage(1), 400); });
  section.table = table;
  return { section, table, reload: () => table.setData() };
}
