"""The Python Call Stacks view in headless Chromium on a real imported trace: the icicle's root and a clicked frame
show the totals summed here from the raw JSON, the frame's ops are the raw ops that started in it, a cProfile
output opens with what it is, hostile frame names stay text, and bad API parameters are 400s."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import httpx
import pytest
from conftest import data_file, sql
from raw_kineto import events
from test_python_stacks import BERT, PROGRAM, call_path_of, db_paths, raw_frames, raw_tree
from test_viewer_browser import Server, cell_texts, page, ready, shot  # noqa: F401 (page is a fixture)
from trace_builder import PID, TID, KinetoTrace

pytestmark = [pytest.mark.browser, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
HOSTILE = '<img src=x onerror="window.__pwned=3">'


@pytest.fixture(scope="module")
def bert_server(import_db):
    s = Server([import_db(data_file(*BERT))])
    s.db = import_db(data_file(*BERT))
    yield s
    s.stop()


def shown_ns(pg, what: str) -> int:
    return int(pg.get_attribute(f"[data-testid=detail-{what}]", "data-ns"))


def raw_ops_started_in(path) -> Counter:
    """Per call path (pid, tid, functions): the raw ops whose innermost enclosing frame has that path and that are
    not inside another op of that frame, the op calls the view lists for it."""
    frames = raw_frames(path)
    path_of = call_path_of(frames)

    def innermost(items, t, thread):
        around = [x for x in items if (x.pid, x.tid) == thread and x.start <= t < x.end]
        return max(around, key=lambda x: (x.start, -x.end)) if around else None

    ops = [e for e in events(path) if e.cat == "cpu_op"]
    count: Counter = Counter()
    for op in ops:
        frame = innermost(frames, op.start, (op.pid, op.tid))
        if frame is None:
            continue
        parent = innermost([o for o in ops if o is not op and o.end - o.start >= op.end - op.start],
                           op.start, (op.pid, op.tid))
        if parent is not None and innermost(frames, parent.start, (op.pid, op.tid)) is frame:
            continue
        count[(frame.pid, frame.tid, path_of(frame))] += 1
    return count


def test_flame_graph_root_and_a_clicked_frame_show_the_raw_totals(bert_server, page):
    path = data_file(*BERT)
    total, _ = raw_tree(path)
    roots = sum(e.end - e.start for e in raw_frames(path) if e.args.get("Python parent id") is None)
    ready(page, f"{bert_server.base}/python")
    assert shown_ns(page, "total") == roots > 0
    assert page.inner_text("[data-testid=detail-name]") == "all threads"
    # one thread: its outermost frames
    thread = (19392, 19392)
    page.select_option("[data-testid=python-thread]", f"0:{thread[0]}:{thread[1]}")
    page.wait_for_selector("body[data-ready='1']")
    assert shown_ns(page, "total") == sum(t for k, t in total.items() if k[:2] == thread and len(k[2]) == 1)
    # Back to the page as first drawn draws all threads again (the view drew the thread without a page render)
    page.go_back()
    page.wait_for_function(f"document.querySelector('[data-testid=detail-total]')?.dataset.ns === '{roots}'",
                           timeout=10_000)
    page.select_option("[data-testid=python-thread]", f"0:{thread[0]}:{thread[1]}")
    page.wait_for_selector("body[data-ready='1']")
    # click the frame of the BERT layer's forward with the most time, the ops' frame
    stored = db_paths(bert_server.db)
    started = raw_ops_started_in(path)
    key = max((k for k in stored if k[2][-1].startswith("transformers/models/bert/modeling_bert.py")
               and started[k]), key=lambda k: total[k])
    page.click(f"[data-node='0:{stored[key][0]}']")
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector("[data-testid=python-ops-table]")
    children = sum(t for k, t in total.items() if k[:2] == key[:2] and k[2][:-1] == key[2])
    assert shown_ns(page, "total") == total[key]
    assert shown_ns(page, "self") == total[key] - children
    assert page.inner_text("[data-testid=detail-place]") == key[2][-1].split("(")[0] + ":" + \
        key[2][-1].split("(")[1].split(")")[0]
    calls = [int(c.replace(",", "")) for c in
             page.locator("[data-testid=python-ops-table] tbody tr td:nth-child(2)").all_inner_texts()]
    assert sum(calls) == started[key] > 0
    assert f"frame={stored[key][0]}" in page.url
    shot(page, "python-frame")
    # the top bar zooms back out to the parent
    page.click("[data-testid=flame-root]")
    page.wait_for_selector("body[data-ready='1']")
    assert shown_ns(page, "total") == total[(*key[:2], key[2][:-1])]
    # the browser's Back walks the drill-down back: the frame, the thread, then all threads as first drawn
    for want in (total[key], sum(t for k, t in total.items() if k[:2] == thread and len(k[2]) == 1), roots):
        page.go_back()  # the view is drawn again for that URL: its total comes back (polled: drawing is async)
        page.wait_for_function(f"document.querySelector('[data-testid=detail-total]')?.dataset.ns === '{want}'",
                               timeout=10_000)
    assert "frame=" not in page.url and "thread=" not in page.url
    assert page.errors == []


def test_the_ops_table_shows_the_innermost_user_file_line(bert_server, page):
    """On this trace the user's code is the TraceLens app's ``moca`` package (everything else is a library): an op's
    stack is the innermost ``moca/`` frame above it, by the raw Python ids."""
    path = data_file(*BERT)
    frames = raw_frames(path)
    by_id = {(e.pid, e.args["Python id"]): e for e in frames}
    expected = set()
    for op in (e for e in events(path) if e.cat == "cpu_op"):
        around = [f for f in frames if (f.pid, f.tid) == (op.pid, op.tid) and f.start <= op.start < f.end]
        f = max(around, key=lambda x: (x.start, -x.end))
        while not f.name.startswith("moca/"):
            f = by_id[(f.pid, f.args["Python parent id"])]
        file, line = f.name.split("(")[0], f.name.split("(")[1].split(")")[0]
        expected.add(f"{file}:{line}")
    (where,) = expected  # every op of this inference runs under one user line
    ready(page, f"{bert_server.base}/ops-kernels")
    cells = cell_texts(page, "ops", "scope")
    assert cells and all(c == where for c in cells)
    assert page.errors == []


def test_the_api_refuses_bad_parameters(bert_server):
    for query, param in (("thread=1:2", "thread"), ("thread=0:1:2", "thread"), ("node=abc&rank=0", "node"),
                         ("node=999999&rank=0", "node"), ("node=1", "rank")):
        res = httpx.get(f"{bert_server.base}/api/python/tree?{query}")
        assert res.status_code == 400 and res.json()["parameter"] == param, query
    res = httpx.get(f"{bert_server.base}/api/python/ops?rank=0&node=-5")
    assert res.status_code == 400 and res.json()["parameter"] == "node"
    assert httpx.get(f"{bert_server.base}/python?thread=zz").status_code == 400


def test_hostile_frame_names_stay_text(tmp_path, page):
    t = KinetoTrace()
    t.events.append({"ph": "X", "cat": "python_function", "name": f"{HOSTILE}(1): <script>window.__pwned=4</script>",
                     "pid": PID, "tid": TID, "ts": 0, "dur": 100, "args": {"Python id": 1, "Python parent id": None}})
    t.events.append({"ph": "X", "cat": "python_function", "name": f"<built-in method {HOSTILE}>", "pid": PID,
                     "tid": TID, "ts": 10, "dur": 50, "args": {"Python id": 2, "Python parent id": 1}})
    t.op("aten::mm", 20, 30)
    from dlscope.pipeline import build_database

    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    s = Server([db])
    try:
        ready(page, f"{s.base}/python")
        (node,) = sql(db, "SELECT node_id FROM python_tree WHERE depth = 1")[0]
        assert page.inner_text(f"[data-node='0:{node}']") == f"<built-in method {HOSTILE}>"
        page.click(f"[data-node='0:{node}']")
        page.wait_for_selector("[data-testid=python-ops-table]")
        assert page.inner_text("[data-testid=detail-name]") == f"<built-in method {HOSTILE}>"
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#content img").count() == 0 and page.locator("#content script").count() == 0
        assert page.errors == []
    finally:
        s.stop()


def test_a_cprofile_database_says_what_it_is(tmp_path, page):
    (tmp_path / "prog.py").write_text(PROGRAM)
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(tmp_path / "run.prof"), str(tmp_path / "prog.py")],
                   check=True, cwd=tmp_path)
    from dlscope.pipeline import build_database

    db = build_database([tmp_path / "run.prof"], tmp_path / "c.sqlite", progress=False)
    s = Server([db])
    try:
        ready(page, f"{s.base}/python")
        assert "From a cProfile output" in page.inner_text("#content")
        shot(page, "cprofile-python")
        top = sql(db, "SELECT MAX(total_ns) FROM python_tree WHERE parent_node_id < 0")[0][0]
        assert shown_ns(page, "total") >= top > 0
        ready(page, f"{s.base}/dashboard")
        text = page.inner_text("#content")
        assert "cProfile" in text and page.errors == []
        shot(page, "cprofile-dashboard")
    finally:
        s.stop()
