"""Python call stacks: the python_function frames a real trace holds (kept + dropped = the raw count), the call tree
against sums computed here from the raw JSON, each op's innermost user file:line (legacy ``Call stack`` arg and a
CPU capture with --with-stack), and cProfile outputs against what ``marshal.load`` of the file says."""

from __future__ import annotations

import json
import marshal
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import REPO, data_file, sql
from raw_kineto import events
from trace_builder import PID, TID, KinetoTrace

from dlscope.importers.kineto import Reading, load_kineto

BERT = ("kineto", "tracelens_h100_bert_small_infer.json.gz")
LEGACY = ("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")
ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def raw_frames(path: Path) -> list:
    return [e for e in events(path) if e.cat == "python_function"]


def function_of(name: str) -> str:
    """A frame's function as the test defines it: the recorded name less a built-in's object address."""
    return ADDRESS.sub("", name)


def call_path_of(frames: list):
    """A function giving a raw frame's call path (its functions from the thread's outermost frame down), by
    following the JSON's Python parent ids."""
    by_id = {(e.pid, e.args["Python id"]): e for e in frames}

    def path_of(e) -> tuple:
        out = []
        while e is not None:
            out.append(function_of(e.name))
            up = e.args.get("Python parent id")
            e = by_id.get((e.pid, up)) if up is not None else None
        return tuple(reversed(out))

    return path_of


def raw_tree(path: Path) -> tuple[dict, dict]:
    """Per (pid, tid, call path): the frames' summed duration and count, straight from the JSON's Python ids."""
    frames = raw_frames(path)
    path_of = call_path_of(frames)
    total: dict = defaultdict(int)
    calls: dict = defaultdict(int)
    for e in frames:
        key = (e.pid, e.tid, path_of(e))
        total[key] += e.end - e.start
        calls[key] += 1
    return total, calls


def db_paths(db: Path) -> dict:
    """Per (pid, tid, call path) from the stored tree: (node_id, calls, total_ns, self_ns)."""
    rows = sql(db, "SELECT node_id, parent_node_id, pid, tid, name, calls, total_ns, self_ns FROM python_tree")
    by_id = {r[0]: r for r in rows}

    def path_of(r) -> tuple:
        out = []
        while r is not None:
            out.append(r[4])
            r = by_id.get(r[1])
        return tuple(reversed(out))

    return {(r[2], r[3], path_of(r)): (r[0], r[5], r[6], r[7]) for r in rows}


def test_every_python_frame_is_kept_or_counted_as_dropped():
    path = data_file(*BERT)
    raw = len(raw_frames(path))
    profile = load_kineto(path)
    kept = profile.meta["python_frames"]
    assert len(profile.python_frames) == kept["kept"] == raw == 1385
    assert kept["dropped"] == 0
    small = load_kineto(path, reading=Reading(max_python_frames=100))
    meta = small.meta["python_frames"]
    assert len(small.python_frames) == meta["kept"] == 100
    assert meta["kept"] + meta["dropped"] == raw and "shortest" in meta["dropped_reason"]
    # the longest were kept: no dropped frame lasted longer than the shortest kept one
    durations = sorted((e.end - e.start for e in raw_frames(path)), reverse=True)
    kept_durations = (small.python_frames["end"] - small.python_frames["start"]).to_numpy()
    assert kept_durations.min() == durations[99] and sorted(kept_durations, reverse=True) == durations[:100]


def test_a_bounded_import_hangs_kept_frames_from_their_nearest_kept_ancestor(import_db, tmp_path):
    from dlscope.pipeline import build_database

    path = data_file(*BERT)
    db = build_database([path], tmp_path / "small.sqlite", progress=False,
                        reading=Reading(max_python_frames=300))
    frames = raw_frames(path)
    by_id = {(e.pid, e.args["Python id"]): e for e in frames}
    stored = sql(db, "SELECT python_id, parent_id, pid FROM python_frames")
    kept_ids = {(pid, pyid) for pyid, _, pid in stored}
    frame_of_row = {i: (pid, pyid) for i, (pyid, _, pid) in enumerate(stored)}
    for pyid, parent_row, pid in stored:
        e, want = by_id[(pid, pyid)], None
        up = e.args.get("Python parent id")
        while up is not None and (pid, up) not in kept_ids:
            up = by_id[(pid, up)].args.get("Python parent id")
        want = None if up is None else (pid, up)
        assert (frame_of_row[parent_row] if parent_row >= 0 else None) == want
    summary = json.loads(sql(db, "SELECT meta_json FROM sources")[0][0])["python_frames"]
    assert summary["kept"] == 300 and summary["kept"] + summary["dropped"] == len(frames)


def test_import_says_how_many_frames_it_dropped(tmp_path):
    path = data_file(*BERT)
    res = dlscope("import", str(path), "-o", str(tmp_path / "b.sqlite"), "--max-python-frames", "500")
    assert res.returncode == 0, res.stderr
    raw = len(raw_frames(path))
    text = " ".join(res.stdout.split())  # the terminal summary wraps at 120 columns
    assert f"Python frames: 500 kept of {raw:,} recorded" in text
    assert f"{raw - 500:,} dropped (more than 500 frames: the shortest were dropped)" in text
    s = json.loads(dlscope("summary", str(tmp_path / "b.sqlite"), "--json").stdout)["python"]
    assert s["frames"]["kept"] == 500 and s["frames"]["dropped"] == raw - 500 and s["source"] == "trace"


def test_call_tree_totals_equal_sums_of_the_raw_frames(import_db):
    path = data_file(*BERT)
    db = import_db(path)
    total, calls = raw_tree(path)
    stored = db_paths(db)
    assert set(stored) == set(total)
    for key, (_, n, t, _) in stored.items():
        assert (n, t) == (calls[key], total[key]), key
    # each thread's outermost frames, summed
    for pid, tid in {(k[0], k[1]) for k in total}:
        raw_roots = sum(e.end - e.start for e in raw_frames(path)
                        if (e.pid, e.tid) == (pid, tid) and e.args.get("Python parent id") is None)
        assert sql(db, "SELECT SUM(total_ns) FROM python_tree WHERE pid = ? AND tid = ? AND parent_node_id < 0",
                   (pid, tid))[0][0] == raw_roots > 0
    # self time: a node's total less its children's, for the node doing the most of its own work below depth 3
    key = max((k for k in stored if len(k[2]) > 3), key=lambda k: stored[k][3])
    children = sum(t for k, t in total.items() if k[:2] == key[:2] and k[2][:-1] == key[2])
    assert stored[key][3] == total[key] - children > 0


def test_ops_link_to_their_innermost_enclosing_frame(import_db):
    path = data_file(*BERT)
    db = import_db(path)
    frames = raw_frames(path)
    ops = [e for e in events(path) if e.cat == "cpu_op"]
    linked = dict(sql(db, "SELECT o.start, f.name FROM op_instances o JOIN python_frames f ON f.frame_id = o.frame_id"))
    for op in ops[:200]:
        around = [f for f in frames if (f.pid, f.tid) == (op.pid, op.tid) and f.start <= op.start < f.end]
        innermost = max(around, key=lambda f: (f.start, -f.end))
        assert linked[op.start] == innermost.name


def test_legacy_call_stack_gives_each_op_its_user_file_line():
    path = data_file(*LEGACY)
    profile = load_kineto(path)
    ops = [e for e in events(path) if e.cat in ("cpu_op", "Operator") and not e.name.startswith("ProfilerStep#")]
    stacks = profile.ops["stack"].tolist()
    assert len(stacks) == len(ops)
    checked = 0
    for op, stack in zip(ops, stacks):
        frames = op.args.get("Call stack", "").split(";")
        mine = [f for f in frames if f.startswith("resnet50_profiler_api.py(")]  # the user's script, by hand
        if mine:
            line = re.match(r"resnet50_profiler_api\.py\((\d+)\)", mine[0]).group(1)
            assert stack == f"resnet50_profiler_api.py:{line}"
            checked += 1
        else:
            assert stack == ""
    assert checked > 10_000


def test_frames_without_python_ids_nest_by_time(tmp_path):
    """Hand-made: no Python ids, so frames nest by time on their thread; the numbers are worked out by hand."""
    t = KinetoTrace()
    for name, ts, end in (("train.py(10): main", 0, 100), ("train.py(20): step", 10, 60),
                          ("train.py(30): forward", 12, 40), ("train.py(20): step", 65, 95),
                          ("train.py(30): forward", 70, 80)):
        t.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": TID, "ts": ts,
                         "dur": end - ts, "args": {}})
    t.op("aten::mm", 14, 20)
    t.op("aten::add", 45, 50)
    from dlscope.pipeline import build_database

    db = build_database([t.write(tmp_path / "t.json")], tmp_path / "t.sqlite", progress=False)
    tree = {r[0]: r[1:] for r in sql(db, "SELECT name, calls, total_ns, self_ns, depth FROM python_tree")}
    assert tree == {"train.py(10): main": (1, 100_000, 100_000 - 80_000, 0),
                    "train.py(20): step": (2, 80_000, 80_000 - 38_000, 1),
                    "train.py(30): forward": (2, 38_000, 38_000, 2)}
    assert dict(sql(db, "SELECT name, stack FROM ops")) == {"aten::mm": "train.py:30", "aten::add": "train.py:20"}


# ------------------------------------------------------------------------------------------- cProfile

PROGRAM = textwrap.dedent("""
    import json

    def inner(n):
        return json.dumps(list(range(n)))

    def outer():
        return [inner(100) for _ in range(200)]

    outer()
""")


@pytest.fixture(scope="module")
def prof(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cprofile")
    (folder / "prog.py").write_text(PROGRAM)
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(folder / "run.prof"), str(folder / "prog.py")],
                   check=True, cwd=folder)
    return folder / "run.prof"


def dlscope(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlscope", *args], capture_output=True, text=True, cwd=REPO, **kw)


def test_cprofile_tree_equals_the_marshalled_statistics(prof, tmp_path):
    with open(prof, "rb") as f:
        raw = marshal.load(f)  # {(file, line, func): (cc, nc, tottime, cumtime, {caller: (nc, cc, tt, ct)})}
    res = dlscope("import", str(prof), "-o", str(tmp_path / "c.sqlite"))
    assert res.returncode == 0, res.stderr
    db = tmp_path / "c.sqlite"
    rows = {(r[0], r[1]): r[2:] for r in sql(db, "SELECT file, function, calls, total_ns, self_ns, node_id, "
                                                 "parent_node_id FROM python_tree WHERE file LIKE '%prog.py'")}
    key = {f: k for k in raw if k[0].endswith("prog.py") for f in (k[2],)}
    outer, inner = raw[key["outer"]], raw[key["inner"]]
    assert rows[(key["outer"][0], "outer")][:3] == (outer[1], round(outer[3] * 1e9), round(outer[2] * 1e9))
    # inner's only caller is the list comprehension in outer (one path): its edge's calls and times
    (edge,) = inner[4].values()
    assert rows[(key["inner"][0], "inner")][:3] == (edge[0], round(edge[3] * 1e9), round(edge[2] * 1e9)) \
        == (200, round(inner[3] * 1e9), round(inner[2] * 1e9))
    # the program's entry (exec) is the root: its cumulative time
    top = max(raw.values(), key=lambda v: v[3])
    assert sql(db, "SELECT MAX(total_ns) FROM python_tree WHERE parent_node_id < 0")[0][0] == round(top[3] * 1e9)
    # a function's time is given out once: its nodes never hold more self time than it had
    for (file, line, func), (_, _, tt, _, _) in raw.items():
        name = func if (file, line) == ("~", 0) else f"{file}({line}): {func}"
        held = sql(db, "SELECT COALESCE(SUM(self_ns), 0) FROM python_tree WHERE name = ?", (name,))[0][0]
        assert held <= round(tt * 1e9), name
    assert "cProfile output" in res.stdout and "no timeline" in res.stdout
    s = json.loads(dlscope("summary", str(db), "--json").stdout)
    assert s["aggregation"] is None and s["python"]["source"] == "cprofile"
    assert s["python"]["frames"]["functions"] == len(raw)


def test_a_cprofile_database_is_not_aggregated_or_reported_as_zeros(prof, tmp_path):
    db = tmp_path / "c.sqlite"
    assert dlscope("import", str(prof), "-o", str(db), "--quiet").returncode == 0
    for args in (("aggregate", str(db)), ("report", str(db), "-o", str(tmp_path / "reports"))):
        res = dlscope(*args)
        assert res.returncode == 2 and "cProfile output's Python call tree only" in res.stderr, args
        assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "reports").exists()
    assert sql(db, "SELECT COUNT(*) FROM aggregations") == [(0,)]


OTHER = {"a": 1}  # referenced by a name, so marshal writes it with its reference flag, as cProfile's dict is


@pytest.mark.parametrize("content,problem", [
    (None, "cannot unmarshal"),                                 # the real output, cut short
    (b"\xfb" + b"junk" * 10, "is not a cProfile output"),       # starts like one, is not
    (marshal.dumps(OTHER), "is not a cProfile output"),         # a marshalled dict of something else
])
def test_a_bad_cprofile_output_is_one_line_and_exit_2(prof, tmp_path, content, problem):
    bad = tmp_path / "bad.prof"
    bad.write_bytes(prof.read_bytes()[:200] if content is None else content)
    res = dlscope("import", str(bad), "-o", str(tmp_path / "x.sqlite"))
    assert res.returncode == 2
    assert problem in res.stderr and len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.prof"]  # nothing half-written, no temp file


def _view_prof(prof: Path, temp: Path) -> subprocess.Popen:
    """``dlscope view run.prof`` with TMPDIR=temp, once its Python tree answers."""
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dlscope", "view", str(prof), "-p", str(port)], cwd=REPO,
                            env={**__import__("os").environ, "TMPDIR": str(temp)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(150):
        try:
            tree = httpx.get(f"http://127.0.0.1:{port}/api/python/tree", timeout=1).json()
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    else:
        proc.kill()
        raise AssertionError(proc.stdout.read().decode() if proc.stdout else "no viewer")
    assert any(n["function"] == "outer" for n in tree["nodes"])
    return proc


def test_view_of_a_cprofile_output_leaves_no_temporary_database(prof, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = _view_prof(prof, temp)
    try:
        assert len(list(temp.iterdir())) == 1  # the temporary database's folder, while the viewer runs
    finally:
        proc.terminate()
        proc.wait(20)
    assert list(temp.iterdir()) == []


def test_the_folder_of_a_killed_cprofile_viewer_is_removed_by_the_next_viewer(prof, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    killed = _view_prof(prof, temp)
    killed.kill()  # SIGKILL: no cleanup runs
    killed.wait(20)
    (left,) = temp.iterdir()
    proc = _view_prof(prof, temp)
    try:
        assert left not in list(temp.iterdir()) and len(list(temp.iterdir())) == 1
    finally:
        proc.terminate()
        proc.wait(20)
    assert list(temp.iterdir()) == []


# -------------------------------------------------------------------------------------- capture


CAPTURED = textwrap.dedent("""
    import torch

    def train_step(model, opt, x):
        loss = model(x).sum()
        loss.backward()
        opt.step()

    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(6):
        train_step(model, opt, torch.randn(8, 16))
""")


@pytest.mark.slow
def test_capture_with_stack_has_frames_and_ops_show_the_users_file_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CAPTURED)
    res = dlscope("profile", "--with-stack", "-o", str(tmp_path / "run.sqlite"), "--", sys.executable, str(script))
    assert res.returncode == 0, res.stderr
    db = tmp_path / "run.sqlite"
    assert sql(db, "SELECT COUNT(*) FROM python_frames")[0][0] > 0
    # Kineto names a function entered while tracing by its def line, and a file by its path under sys.path
    line = CAPTURED.splitlines().index("def train_step(model, opt, x):") + 1
    stacks = dict(sql(db, "SELECT name, stack FROM ops WHERE parent_id < 0"))
    assert stacks["aten::linear"] == f"train.py:{line}"
    shown = sql(db, "SELECT stack FROM agg_ops WHERE op_name = 'aten::linear'")
    assert shown and all(s == stacks["aten::linear"] for (s,) in shown)
    assert sql(db, "SELECT SUM(calls) FROM python_tree WHERE function = 'train_step'")[0][0] >= 1
    conn = sqlite3.connect(db)
    try:
        capture = json.loads(conn.execute("SELECT value FROM dlscope_meta WHERE key = 'extra_json'").fetchone()[0])
    finally:
        conn.close()
    assert capture["capture"]["with_stack"] is True


def test_a_job_imported_rank_by_rank_or_by_workers_stores_the_same_frames_and_tree(tmp_path, monkeypatch):
    import gzip

    from test_distributed import _db_tables, _rank_by_rank

    from dlscope import pipeline

    with gzip.open(data_file(*BERT), "rt") as f:
        doc = json.load(f)
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
        with gzip.open(folder / f"rank{rank}.json.gz", "wt") as f:
            json.dump(doc, f)
    pipeline.build_database([folder], tmp_path / "whole.sqlite", progress=False, workers=1)
    pipeline.build_database([folder], tmp_path / "pooled.sqlite", progress=False, workers=2)
    seen = _rank_by_rank(monkeypatch)
    pipeline.build_database([folder], tmp_path / "ranks.sqlite", progress=False, max_memory="16GB")
    assert len(seen) == 2
    whole, ranks = _db_tables(tmp_path / "whole.sqlite", True), _db_tables(tmp_path / "ranks.sqlite", True)
    pooled = _db_tables(tmp_path / "pooled.sqlite", True)
    for table in ("python_frames", "python_tree", "op_instances", "op_nodes"):
        assert ranks[table] == whole[table] == pooled[table], table
    assert sql(tmp_path / "whole.sqlite", "SELECT COUNT(DISTINCT rank), COUNT(*) FROM python_tree") == [(2, 2 * 1071)]


@pytest.mark.parametrize("reading", [Reading(method="streamed", piece_bytes=50_000, block_bytes=7_919, fallback=False),
                                     Reading(method="ijson")], ids=["streamed", "ijson"])
def test_every_reader_keeps_the_same_python_frames_and_stacks(reading):
    from conftest import assert_same_rows

    path = data_file(*LEGACY) if reading.method == "ijson" else data_file(*BERT)
    whole, other = load_kineto(path), load_kineto(path, reading=reading)
    assert_same_rows(whole.python_frames, other.python_frames, "python_frames")
    assert sorted(whole.ops["stack"]) == sorted(other.ops["stack"])
    assert whole.meta["python_frames"] == other.meta["python_frames"]


def test_a_trace_without_python_frames_has_no_python_section(import_db):
    from dlscope.present.summary import summary_dict

    db = import_db(data_file("kineto", "hta_event_sync_a100.json.gz"))
    assert summary_dict(db)["python"] is None
    assert sql(db, "SELECT COUNT(*) FROM python_frames") == sql(db, "SELECT COUNT(*) FROM python_tree") == [(0,)]
