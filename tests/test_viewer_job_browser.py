"""Every number the viewer shows, read in a real browser (Playwright + Debian's Chromium) and checked against
``dlscope summary --json`` or SQL on the database, on databases ``dlscope import`` made from real files: the
8-rank DLRM job, a one-GPU ResNet run on a four-GPU machine, an nsys export and a CPU-only profile. Also the
job's views (Ranks, Collectives, GPUs), layout at 1400 px, the Details pane, the roofline's points above their
roof, PDF/CSV exports and picking the second run of a comparison."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from conftest import data_file, sql
from test_viewer_browser import Server, ready, shot

from dlscope.format import fmt_shapes

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# -- what the browser's format.mjs writes, for comparing texts ------------------------------------------------

def _round(x: float, digits: int) -> str:
    """Intl.NumberFormat('en-US', {maximumFractionDigits}) of x (half away from zero, no trailing zeros)."""
    q = Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    text = f"{q:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def js_ns(v) -> str:
    if v is None:
        return "n/a"
    for scale, unit in ((60e9, "min"), (1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1, "ns")):  # noqa: B007 - unit is read after the loop
        if abs(v) >= scale:
            break
    else:
        scale, unit = 1, "ns"
    x = v / scale
    digits = 0 if unit == "ns" else 1 if abs(x) >= 100 else 2 if abs(x) >= 10 else 3
    return f"{_round(x, digits)} {unit}"


def exact(v) -> str:
    return "not measured" if v is None else f"{round(v):,} ns"


def js_pct(v, digits: int = 1) -> str:
    return "n/a" if v is None else f"{v * 100:.{digits}f} %"


def summary(db: Path, rank: int | None = None) -> dict:
    """``dlscope summary --json`` of the database, as a user's script would read it."""
    cmd = [sys.executable, "-m", "dlscope", "summary", str(db), "--json"]
    cmd += ["--rank", str(rank)] if rank is not None else []

    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


# -- fixtures --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dbs(import_db):
    return {"dlrm": import_db(data_file("kineto", "param_dlrm_8rank_v100")),
            "resnet": import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")),
            "nsys": import_db(data_file("nsys_sqlite", "memfusion_tensorrt_nvtx_rtx3090x4_nsys2023.1.sqlite")),
            "cpu": import_db(data_file("kineto", "hta_cpu_only_no_gpu.pt.trace.json.gz"))}


@pytest.fixture(scope="module")
def server(dbs):
    s = Server(list(dbs.values()))
    s.key = {name: str(i) for i, name in enumerate(dbs)}
    s.dbs = dbs
    yield s
    s.stop()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()


def kv(pg, panel: str) -> dict[str, str]:
    labels = pg.locator(f".{panel} table.kv th .label").all_inner_texts()
    values = pg.locator(f".{panel} table.kv td").all_inner_texts()
    return dict(zip(labels, values))


def kv_titles(pg, panel: str) -> dict[str, str | None]:
    rows = pg.locator(f".{panel} table.kv tr")
    out = {}
    for i in range(rows.count()):
        label = rows.nth(i).locator("th .label").inner_text()
        span = rows.nth(i).locator("td span")
        out[label] = span.first.get_attribute("title") if span.count() else None
    return out


def chart_data(pg, selector: str) -> list:
    return pg.evaluate(f"""() => {{ const box = document.querySelector({json.dumps(selector)});
        if (!box || !box.chart) return null;
        return box.chart.getOption().series.map((s) =>
            s.data.map((d) => (d && typeof d === 'object' && 'value' in d) ? d.value : d)); }}""")


def chart_title(pg, selector: str) -> str:
    return pg.evaluate(f"() => document.querySelector({json.dumps(selector)}).chart.getOption().title[0].text")


def rows_of(pg, prefix: str, fields: list[str], attr: str | None = None) -> list[list]:
    out = []
    rows = pg.locator(f"section[data-prefix='{prefix}'] .tabulator-row")
    for i in range(rows.count()):
        row = []
        for f in fields:
            cell = rows.nth(i).locator(f".tabulator-cell[tabulator-field='{f}']")
            if attr:
                span = cell.locator("[title]")
                row.append(span.first.get_attribute(attr) if span.count() else cell.inner_text())
            else:
                row.append(cell.inner_text())
        out.append(row)
    return out


# -- the dashboard: every panel against the summary JSON and the database -------------------------------------

def check_dashboard(pg, db: Path, s: dict) -> None:
    """Every figure of the per-rank dashboard panels of the page against summary ``s`` and SQL on ``db``."""
    a, p = s["aggregation"], s["profile"]
    agg = a["agg_id"]
    # GPU utilization donut
    util = a["gpu_utilization"]
    if util is None:
        assert "not measured" in pg.locator(".p-util").inner_text()
    else:
        assert chart_data(pg, ".p-util .chart")[0] == pytest.approx([util, 1 - util], abs=1e-12)
        assert chart_title(pg, ".p-util .chart") == js_pct(util)
    # resource usage breakdown: the seven parts, in DLProf's order
    parts = list(a["resource_breakdown_ns"].values())
    assert sum(parts) == a["wall_clock_ns"]
    assert chart_data(pg, ".p-breakdown .chart")[0] == parts
    # total kernel GPU time: slices TC, memory, other; the centre is their sum
    mem = sql(db, "SELECT COALESCE(SUM(m.dur), 0), COUNT(*) FROM memops m JOIN agg_iterations i ON i.agg_id = ? AND "
                  "i.profiled = 1 AND i.rank = m.rank AND i.iteration = m.iteration", (agg,))[0]
    tc_count = sql(db, "SELECT COUNT(*) FROM kernels k JOIN agg_iterations i ON i.agg_id = ? AND i.profiled = 1 AND "
                       "i.rank = k.rank AND i.iteration = k.iteration WHERE k.uses_tc = 1", (agg,))[0][0]
    slices = [a["tc_kernel_time_ns"], mem[0], a["kernel_time_ns"] - a["tc_kernel_time_ns"]]
    if sum(slices):
        assert chart_data(pg, ".p-kernels .chart")[0] == slices
        assert chart_title(pg, ".p-kernels .chart") == js_ns(sum(slices))
        assert pg.get_by_test_id("kernel-total-parts").inner_text() == \
            f"{js_ns(sum(slices))} = kernels {js_ns(a['kernel_time_ns'])} + memory operations {js_ns(mem[0])}"
    else:
        assert pg.locator(".p-kernels canvas").count() == 0
        assert "No GPU kernels or memory operations ran" in pg.locator(".p-kernels").inner_text()
    # Tensor Core kernel efficiency
    eff = a["tc_kernel_efficiency"]
    if eff is None:
        assert "cannot be computed" in pg.locator(".p-tce").inner_text()
    else:
        assert chart_data(pg, ".p-tce .chart")[0] == pytest.approx([eff, 1 - eff], abs=1e-12)
    # performance summary
    total_its = sql(db, "SELECT COUNT(DISTINCT iteration) FROM agg_iterations WHERE agg_id = ?", (agg,))[0][0]
    na = "n/a"

    def noted(shown: str, note: str | None) -> str:
        """A figure that is n/a says why, in the summary's words (a figure shown keeps its note as its title)."""
        return f"{na} ({note})" if shown == na and note else shown
    expected = {
        "Wall Clock Time (s)": f"{a['wall_clock_ns'] / 1e9:.3f}",
        "Tensor Core Kernel Efficiency (%)": noted(na if eff is None else f"{eff * 100:.1f}",
                                                   a.get("tc_kernel_efficiency_note")),
        "GPU Utilization (%)": na if util is None else f"{util * 100:.1f}",
        "Total Iterations": na if a["iterations_profiled"] is None else str(total_its),
        "Profiled Iterations": na if a["iterations_profiled"] is None else str(a["iterations_profiled"]),
        "Start Iteration": na if a["iter_start"] is None else str(a["iter_start"]),
        "Stop Iteration": na if a["iter_stop"] is None else str(a["iter_stop"]),
        "Average Iteration Time (ms)": na if a["avg_iteration_ns"] is None else f"{a['avg_iteration_ns'] / 1e6:.3f}",
        "Key Node": a["key_node"] or "(default)", "Iteration Method": a["iteration_method"]}
    tp, mfu = a["throughput"], a["mfu"]  # seed 003's figures and MFU, as the summary JSON gives them
    precision = f" · {mfu['precision'].upper()} dense peak" if mfu["precision"] else ""
    expected.update({
        f"Throughput ({tp['unit']}/s)": na if tp["samples_per_s"] is None else f"{tp['samples_per_s']:.1f}",
        "Reader Cost (ms per iteration)": na if tp["reader_cost_ns"] is None else f"{tp['reader_cost_ns'] / 1e6:.3f}",
        "Reader Cost / Batch Cost (%)": na if tp["reader_cost_ratio"] is None
        else f"{tp['reader_cost_ratio'] * 100:.1f}",
        "Model FLOPs per Iteration (GFLOP)": na if mfu["model_flops_per_iteration"] is None
        else f"{mfu['model_flops_per_iteration'] / 1e9:.3f}",
        f"MFU (%){precision}": noted(na if mfu["mfu"] is None else
                                    f"{'≥ ' if a.get('mfu_lower_bound') else ''}{mfu['mfu'] * 100:.1f}",
                                    a.get("mfu_note"))})
    assert kv(pg, "p-summary") == expected
    titles = kv_titles(pg, "p-summary")
    assert titles["Wall Clock Time (s)"] == exact(a["wall_clock_ns"])
    if a["avg_iteration_ns"] is not None:
        assert titles["Average Iteration Time (ms)"] == exact(a["avg_iteration_ns"])
    # model summary
    m = a["model_summary"]
    share = m["tc_eligible_gpu_time_pct"]
    assert kv(pg, "p-model") == {"Op Nodes": str(m["op_nodes"]), "TC Eligible Op Nodes": str(m["tc_eligible_op_nodes"]),
                                 "Op Nodes Using TC": str(m["op_nodes_using_tc"]),
                                 "GPU Time in TC Eligible Op Nodes (%)": na if share is None else f"{share:.1f}"}
    # top 10 GPU ops: the summary's list (ties in any order)
    top = pg.locator(".p-top tbody tr")
    shown = [(top.nth(i).locator("td").nth(1).locator("a").inner_text(),
              top.nth(i).locator("td span").first.get_attribute("title"),
              top.nth(i).locator("td.num").nth(1).inner_text()) for i in range(top.count())]
    assert sorted(shown) == sorted((o["op_name"], exact(o["gpu_time_ns"]), f"{o['calls']:,}") for o in a["top_gpu_ops"])
    assert [x[1] for x in shown] == [exact(o["gpu_time_ns"]) for o in a["top_gpu_ops"]]
    # a name that repeats shows its shapes (the summary's input_shapes), one that does not shows none
    names = [o["op_name"] for o in a["top_gpu_ops"]]
    hints = {(x[0], x[1]): top.nth(i).get_by_test_id("top-op-shapes").all_inner_texts() for i, x in enumerate(shown)}
    assert hints == {(o["op_name"], exact(o["gpu_time_ns"])):
                     [fmt_shapes(o["input_shapes"])] if names.count(o["op_name"]) > 1 and fmt_shapes(o["input_shapes"])
                     else [] for o in a["top_gpu_ops"]}
    # expert systems: every saving, the time exact on hover and the share as a percentage once
    savings = pg.locator(".p-experts .saving")
    with_saving = [f for f in s["findings"] if f["est_saving_ns"]]
    assert savings.count() == len(with_saving)
    for i, f in enumerate(with_saving):
        assert savings.nth(i).get_attribute("title") == exact(f["est_saving_ns"])
        pct = "" if f["est_saving_pct"] is None else f" ({f['est_saving_pct']:.1f} %)"
        assert savings.nth(i).inner_text() == f"Estimated saving: {js_ns(f['est_saving_ns'])}{pct}"
    # system configuration: each physical GPU once
    system = kv(pg, "p-system")
    assert system["GPU Count"] == str(p["gpu_count"])
    active = sorted({g["name"] for g in p["gpus"] if g["active"] and g["name"]})
    assert system["GPU Name(s)"] == (", ".join(active) or na)
    if p["idle_gpu_count"]:
        assert system["Idle GPUs (present, no GPU activity)"].startswith(f"{p['idle_gpu_count']}: ")
    else:
        assert "Idle GPUs (present, no GPU activity)" not in system
    assert system["Ranks"] == str(p["ranks"]) and system["Profile Name"] == s["profile_name"]
    # the Details pane's table
    pg.get_by_role("button", name="Show Kernel Details").click()
    details = {r.locator("th").inner_text(): (r.locator("td span").get_attribute("title"),
                                             r.locator("td").nth(1).inner_text())
               for r in pg.locator("#details tbody tr").all()}
    kc = a["kernel_count"]
    assert details["All Kernels"] == (exact(a["kernel_time_ns"]), f"{kc:,}")
    assert details["Kernels Using TC"] == (exact(a["tc_kernel_time_ns"]), f"{tc_count:,}")
    assert details["Memory Kernels"] == (exact(mem[0]), f"{mem[1]:,}")
    assert details["All Other Kernels"] == (exact(a["kernel_time_ns"] - a["tc_kernel_time_ns"]), f"{kc - tc_count:,}")
    assert details["Total (kernels and memory)"] == (exact(sum(slices)), f"{kc + mem[1]:,}")
    pg.get_by_role("button", name="Close").click()


def test_a_job_opens_on_the_job(server, page):
    db = server.dbs["dlrm"]
    s = summary(db)
    job = s["job"]
    ready(page, f"{server.base}/dashboard?db={server.key['dlrm']}")
    assert page.locator("#nav-profile").inner_text() == f"{s['profile_name']} · job of 8 ranks · rank 0"
    assert page.locator(".p-job h2").inner_text() == "Job of 8 ranks"
    figures = kv(page, "p-job")
    assert figures == {"Job Wall Clock (ms)": f"{job['wall_clock_ns'] / 1e6:.3f}",
                       "GPU Utilization, all GPUs (%)": f"{job['gpu_utilization'] * 100:.1f}",
                       "GPUs": f"{s['profile']['gpu_count']} used", "Ranks": "8", "Hosts": "not recorded in the traces",
                       "Collective Calls": str(len(s["collectives"]))}
    assert kv_titles(page, "p-job")["Job Wall Clock (ms)"] == exact(job["wall_clock_ns"])
    # the ranks table: every rank, every figure (exact values on hover)
    fields = ["rank", "gpu_utilization", "compute_ns", "exposed_communication_ns", "memcpy_ns", "idle_ns",
              "wall_clock_ns", "avg_iteration_ns", "straggler_score", "straggler_rank"]
    page.wait_for_selector("section[data-prefix='ranks'] .tabulator-row")
    shown = rows_of(page, "ranks", fields, "title")
    assert len(shown) == 8
    for row, r in zip(shown, s["ranks"]):
        assert row[0] == f"Open rank {r['rank']}'s dashboard"
        assert row[1] == f"{r['gpu_utilization'] * 100:.4f} %"
        assert row[2:8] == [exact(r[k]) for k in fields[2:8]]
        assert float(row[8]) == r["straggler_score"] and row[9] == str(r["straggler_rank"])
    assert page.get_by_test_id("rank-head").locator("h2").inner_text() == "Rank 0"
    for panel in ("p-util", "p-breakdown", "p-kernels", "p-summary", "p-model", "p-top", "p-experts"):
        assert page.locator(f".{panel} .panel-head h2").inner_text().endswith("· rank 0"), panel
    check_dashboard(page, db, s)
    # every rank is one click away
    page.locator("section[data-prefix='ranks'] .tabulator-cell[tabulator-field='rank'] a", has_text="rank 3").click()
    page.wait_for_selector("body[data-ready='1']")
    s3 = summary(db, rank=3)
    assert f"agg={s3['aggregation']['agg_id']}" in page.url
    assert page.locator("#nav-profile").inner_text().endswith("· job of 8 ranks · rank 3")
    assert page.locator("#nav-rank option").all_inner_texts() == [f"rank {r}" for r in range(8)]
    assert page.get_by_test_id("rank-head").locator("h2").inner_text() == "Rank 3"
    check_dashboard(page, db, s3)
    shot(page, "job-dashboard-rank3")
    assert page.errors == []


@pytest.mark.parametrize("name", ["resnet", "nsys", "cpu"])
def test_every_dashboard_number_of_a_single_process_profile(server, page, name):
    db = server.dbs[name]
    s = summary(db)
    ready(page, f"{server.base}/dashboard?db={server.key[name]}")
    assert page.locator(".p-job").count() == 0 and "job of" not in page.locator("#nav-profile").inner_text()
    check_dashboard(page, db, s)
    shot(page, f"dashboard-{name}")
    assert page.errors == []


def test_the_ranks_view(server, page):
    s = summary(server.dbs["dlrm"])
    ready(page, f"{server.base}/ranks?db={server.key['dlrm']}")
    assert page.locator("h1").inner_text() == "Ranks of the job (8)"
    page.wait_for_selector("section[data-prefix='ranks'] .tabulator-row")
    rows = rows_of(page, "ranks", ["rank", "idle_ns", "straggler_rank"], "title")
    assert [(r[1], r[2]) for r in rows] == [(exact(x["idle_ns"]), str(x["straggler_rank"])) for x in s["ranks"]]
    page.locator("section[data-prefix='ranks'] .tabulator-row").nth(5).click(position={"x": 200, "y": 8})
    page.wait_for_selector("body[data-ready='1']")
    assert page.get_by_test_id("rank-head").locator("h2").inner_text() == "Rank 5"


def test_the_collectives_view(server, page):
    db = server.dbs["dlrm"]
    s = summary(db)
    ready(page, f"{server.base}/collectives?db={server.key['dlrm']}")
    page.wait_for_selector("section[data-prefix='calls'] .tabulator-row")
    fields = ["collective", "call_index", "ranks", "max_dur_ns", "min_dur_ns", "max_lag_ns", "last_rank"]
    shown = rows_of(page, "calls", fields, "title")
    expected = sorted(s["collectives"], key=lambda c: c["first_start"])
    assert [r[:3] for r in shown] == [[c["collective"], str(c["call_index"]), str(c["ranks"])] for c in expected]
    assert [r[3:6] for r in shown] == [[exact(c["max_dur_ns"]), exact(c["min_dur_ns"]), exact(c["max_lag_ns"])]
                                       for c in expected]
    assert [r[6] for r in shown] == [str(c["last_rank"]) for c in expected]
    # one call: each rank's kernel from the collectives table
    first = expected[0]
    page.locator("section[data-prefix='calls'] .tabulator-row").first.click(position={"x": 20, "y": 8})
    page.wait_for_selector("section[data-prefix='ranks'] .tabulator-row")
    per_rank = rows_of(page, "ranks", ["rank", "dur_ns", "arrival_lag_ns"], "title")
    stored = sql(db, "SELECT rank, dur_ns, arrival_lag_ns FROM collectives WHERE collective = ? AND call_index = ? "
                     "ORDER BY rank", (first["collective"], first["call_index"]))
    assert per_rank == [[str(r), exact(d), exact(lag)] for r, d, lag in stored]
    assert max(lag for _, _, lag in stored) == first["max_lag_ns"]
    shot(page, "collectives")
    assert page.errors == []


@pytest.mark.parametrize("name", ["dlrm", "resnet"])
def test_the_gpus_view_lists_each_gpu_once_and_hovers_without_errors(server, page, name):
    s = summary(server.dbs[name])
    ready(page, f"{server.base}/gpus?db={server.key[name]}")
    page.wait_for_selector("section[data-prefix='gpus'] .tabulator-row")
    gpus = s["profile"]["gpus"]
    figures = {(g["device"], g["rank"]): g for g in (s["job"]["gpus"] if s["job"] else [])}
    rows = rows_of(page, "gpus", ["device", "ranks", "state", "utilization"])
    assert len(rows) == len(gpus) == s["profile"]["gpu_count"] + s["profile"]["idle_gpu_count"]
    active = [g for g in gpus if g["active"]]
    assert [r[1] for r in rows if r[2] == "active"] == [f"rank {g['rank']}" for g in active]
    assert sum(r[1] == "idle" for r in rows) == s["profile"]["idle_gpu_count"]
    utils = [figures[(g["device"], g["rank"])]["utilization"] for g in active]
    assert chart_data(page, "[data-testid='gpu-chart']")[0] == pytest.approx([u * 100 for u in utils], abs=1e-9)
    box = page.get_by_test_id("gpu-chart").bounding_box()
    for i in range(len(active)):  # hover every bar: the tooltip names the GPU and its rank, no TypeError
        x = box["x"] + 60 + (box["width"] - 80) * (i + 0.5) / len(active)
        page.mouse.move(x, box["y"] + box["height"] * 0.6)
        page.wait_for_timeout(80)
    assert page.errors == []
    tip = page.locator("div[style*='z-index: 9999999']").last
    assert f"rank {active[-1]['rank']}" in tip.inner_text()


# -- layout ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dlrm", "nsys"])
def test_layout_at_1400px_and_the_details_pane_resizes_the_charts(server, page, name):
    ready(page, f"{server.base}/dashboard?db={server.key[name]}")
    clipped = page.evaluate("""() => [...document.querySelectorAll(
            '.p-summary table.kv td, .p-model table.kv td, .p-job table.kv td')]
        .filter((td) => { const p = td.closest('.panel').getBoundingClientRect(), r = td.getBoundingClientRect();
                          return td.scrollWidth > td.clientWidth + 1 || r.right > p.right + 0.5 || r.width < 8; })
        .map((td) => td.innerText)""")
    assert clipped == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400

    def width():
        return page.evaluate("() => { const b = document.querySelector('.p-breakdown .chart'); "
                             "return [b.clientWidth, b.chart.getWidth()]; }")
    before = width()
    assert before[0] == before[1]
    page.get_by_role("button", name="Show Kernel Details").click()
    page.wait_for_function("() => { const b = document.querySelector('.p-breakdown .chart'); "
                           "return b.chart.getWidth() === b.clientWidth; }")
    after = width()
    assert after[0] < before[0] and after[0] == after[1]
    shot(page, f"layout-1400-{name}")


# -- roofline --------------------------------------------------------------------------------------------------

def test_roofline_points_above_their_roof_are_marked_and_explained(server, page, tmp_path):
    db = server.dbs["resnet"]
    subprocess.run([sys.executable, "-m", "dlscope", "report", str(db), "--reports", "roofline", "--formats", "json",
                    "-o", str(tmp_path)], check=True, capture_output=True)
    report = json.loads(next(tmp_path.glob("*roofline*.json")).read_text())
    ops = report["ops"] if isinstance(report, dict) else report
    above = [o for o in ops if (o.get("pct_of_ceiling") or 0) > 100]
    assert above, "the ResNet-50 FP32 run has convolutions above the FP32 peak (Winograd)"
    ready(page, f"{server.base}/roofline?db={server.key['resnet']}")
    note = page.get_by_test_id("above-roof").inner_text()
    assert note.startswith(f"{len(above)} ops above their roof") and "Winograd" in note
    assert f"up to {max(o['pct_of_ceiling'] for o in above):.0f} %" in note
    rings = page.evaluate("() => { const c = document.querySelector('[data-testid=roofline-chart]').chart; "
                          "return c.getOption().series.filter((s) => s.name.startsWith('Above'))"
                          ".map((s) => s.data.length); }")
    assert rings == [len(above)]
    roofs = page.locator("[data-testid='roofs-from'] td")
    line = float(roofs.evaluate("td => parseFloat(getComputedStyle(td).lineHeight) || 16"))
    assert roofs.bounding_box()["height"] < 3 * line      # a name (two lines at most), not a paragraph
    assert page.get_by_test_id("roofs-note").is_visible()
    assert page.errors == []


# -- exports ---------------------------------------------------------------------------------------------------

def test_pdf_and_csv_exports_carry_the_profile_name_and_the_rows(server, page):
    from pypdf import PdfReader

    from dlscope.format import fmt_ns, fmt_pct

    db = server.dbs["dlrm"]
    s = summary(db)
    ready(page, f"{server.base}/ranks?db={server.key['dlrm']}")
    page.wait_for_selector("section[data-prefix='ranks'] .tabulator-row")
    with page.expect_download() as dl:
        page.locator("section[data-prefix='ranks'] a[data-export='pdf']").click()
    assert dl.value.suggested_filename.endswith("-ranks.pdf")
    text = "\n".join(p.extract_text() for p in PdfReader(dl.value.path()).pages)
    assert f"{s['profile_name']} — Ranks" in text and "rank 0 of a job of 8 ranks" in text
    lines = [ln for ln in text.splitlines() if ln.split(" ")[0].isdigit()]
    assert len(lines) == 8
    for ln, r in zip(lines, s["ranks"]):
        assert ln.startswith(f"{r['rank']} ") and fmt_pct(r["gpu_utilization"]) in ln and fmt_ns(r["idle_ns"]) in ln
    with page.expect_download() as dl:
        page.locator("section[data-prefix='ranks'] a[data-export='csv']").click()
    rows = list(csv.reader(io.StringIO(Path(dl.value.path()).read_text())))
    assert rows[0] == [f"{s['profile_name']} — Ranks"] and rows[1][0] == "Rank"
    idle = rows[1].index("Idle (ns)")
    assert [int(r[idle]) for r in rows[2:]] == [r["idle_ns"] for r in s["ranks"]]


# -- compare: the second run picked in the page ----------------------------------------------------------------

def test_picking_the_second_run_of_a_comparison_in_the_page(dbs, import_db, browser, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    base = shutil.copy(dbs["resnet"], folder / "workers0.sqlite")
    shutil.copy(import_db(data_file("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz")),
                folder / "workers4.sqlite")
    (folder / "notes.sqlite").write_bytes(b"not a database")   # listed files are dlscope databases only
    s = Server([Path(base)])
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        pg = context.new_page()
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        ready(pg, f"{s.base}/compare")
        options = pg.get_by_test_id("pick-new").locator("option").all_inner_texts()
        assert [o for o in options if o.endswith(".sqlite")] == ["tbplugin_resnet50_v100_workers4 — workers4.sqlite"]
        value = pg.get_by_test_id("pick-new").locator("option").nth(1).get_attribute("value")
        pg.get_by_test_id("pick-new").select_option(value)
        pg.wait_for_url("**/compare?base=0&new=1")
        pg.wait_for_selector("body[data-ready='1']", timeout=30_000)
        from dlscope.format import fmt_ns
        before, after = summary(Path(base))["aggregation"], summary(folder / "workers4.sqlite")["aggregation"]
        verdict = pg.get_by_test_id("verdict").inner_text()
        assert verdict.startswith(f"Average iteration time {fmt_ns(before['avg_iteration_ns'])} → "
                                  f"{fmt_ns(after['avg_iteration_ns'])}")
        assert pg.get_by_test_id("run-new").locator(".run-name").inner_text() == "tbplugin_resnet50_v100_workers4"
        assert errors == []
        context.close()
    finally:
        s.stop()
