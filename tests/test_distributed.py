"""Whole distributed jobs: ranks, parallel / Dask import, per-rank figures, collectives, stragglers.

Numbers are checked against independent counts from the raw files (json / csv read here directly).
"""

from __future__ import annotations

import csv
import gzip
import json
import lzma
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import assert_same_rows, data_file

from dlscope.distributed import summary_ranks
from dlscope.distributed.figures import busbw_factor, collective_type
from dlscope.errors import DlscopeError, InputError
from dlscope.importers.nsys_stats_csv import (
    load_nsys_stats_csv,
    looks_like_nsys_stats_csv,
)
from dlscope.pipeline import budget
from dlscope.pipeline import build as pipeline
from dlscope.pipeline.budget import parse_size
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.pipeline.inputs import Identity, expand_inputs, identities, rank_from_name
from dlscope.present.summary import summary_dict

DLRM = "kineto/param_dlrm_8rank_v100"
SAMPLED = "kineto/hta_128rank_sampled"
JAX = "nsys_stats_csv/jaxtoolbox_pax_fsdp4_a100_4proc"


def job(folder: str) -> Path:
    return data_file(*folder.split("/"))


@pytest.fixture
def build_job(tmp_path):
    """build_database on a job's files, serially, on worker processes or on a Dask cluster."""

    def build(paths, name="job.sqlite", workers=1, scheduler=None, max_memory=None, reading=None) -> Path:
        out = tmp_path / name
        pipeline.build_database(paths, out, progress=False, workers=workers, scheduler=scheduler,
                                max_memory=max_memory, reading=reading)
        return out

    return build


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _db_tables(db: Path, in_order: bool = False) -> dict[str, list]:
    """Every table's rows without the creation timestamps, plus the indexes: rows in a stable order, or
    ``in_order`` as stored (then ids and row order must match too)."""
    conn = sqlite3.connect(db)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                            "'search_names_trigram_%' ORDER BY name")]  # FTS5's own storage
        out = {}
        for name in names:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")') if r[1] != "created_at"]
            rows = conn.execute(f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{name}" '
                                "ORDER BY rowid").fetchall()
            rows = [r for r in rows if name != "dlscope_meta" or r[0] != "created_at"]
            out[name] = rows if in_order else sorted(rows, key=repr)
        out["indexes"] = sorted(r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' "
                                                           "AND sql IS NOT NULL"))
        return out
    finally:
        conn.close()


def _summary(db: Path) -> dict:
    out = summary_dict(db)
    conn = sqlite3.connect(db)
    try:
        out["ranks"] = summary_ranks(conn)
    finally:
        conn.close()
    for r in out["ranks"]:
        r.pop("source_path")
    return out


# ------------------------------------------------------------------------------------------ inputs


def test_folder_expands_to_trace_files_in_natural_order(tmp_path):
    for name in ("rank-10.json.gz", "rank-2.json.gz", "rank-1.json.gz", "notes.txt", ".hidden.json"):
        (tmp_path / name).write_bytes(b"{}")
    assert [p.name for p in expand_inputs([tmp_path])] == ["rank-1.json.gz", "rank-2.json.gz", "rank-10.json.gz"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no trace files"):
        expand_inputs([tmp_path / "empty"])


@pytest.mark.parametrize("name, expected", [
    ("rank-3.json.gz", (3, -1)), ("worker5.pt.trace.json.gz", (5, -1)), ("proc2_nvtx_pushpop_trace.csv.xz", (2, -1)),
    ("trace_rank3of8.json", (3, 8)), ("sampled_rank_12.json.gz", (12, -1)), ("trace.json", None),
])
def test_rank_from_file_name(name, expected):
    assert rank_from_name(Path(name)) == expected


def test_rank_order_trace_then_name_then_order():
    paths = [Path("a_rank-1.json"), Path("b_rank-0.json")]
    in_trace = [{"rank": 5, "rank_in_trace": True, "world_size": 8}, {"rank": 6, "rank_in_trace": True}]
    assert [i.rank for i in identities(paths, in_trace)] == [5, 6]
    assert identities(paths, in_trace)[0] == Identity(5, 8, "", "trace")
    clash = [{"rank": 0, "rank_in_trace": True}, {"rank": 0, "rank_in_trace": True}]
    assert [(i.rank, i.rank_source) for i in identities(paths, clash)] == [(1, "file_name"), (0, "file_name")]
    assert [i.rank for i in identities([Path("x.json"), Path("y.json")], [{}, {}])] == [0, 1]
    host = identities([Path("node7_1234.1700000000000.pt.trace.json")], [{}])[0]
    assert host.hostname == "node7"


def test_sizes_and_busbw_factors():
    assert parse_size("4GB") == 4 * 10**9 and parse_size("512MiB") == 512 * 2**20 and parse_size("100") == 100
    with pytest.raises(DlscopeError):
        parse_size("lots")
    assert busbw_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("allgather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("reducescatter", 4) == pytest.approx(3 / 4)
    assert busbw_factor("alltoall", 2) == pytest.approx(1 / 2)
    assert busbw_factor("broadcast", 8) == 1 and busbw_factor("reduce", 8) == 1
    assert collective_type("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)") == "allgather"
    assert collective_type("_reduce_scatter_base") == "reducescatter"
    assert collective_type("NCCL:ncclAllReduce") == "allreduce"


# ------------------------------------------------------------------------------------------ real jobs


def test_dlrm_8_ranks_kernel_totals_match_raw_json(build_job):
    folder = job(DLRM)
    db = build_job([folder])
    conn = sqlite3.connect(db)
    got = dict(((r, (n, t)) for r, n, t in conn.execute("SELECT rank, COUNT(*), SUM(dur) FROM kernels GROUP BY rank")))
    expected = {}
    for path in sorted(folder.iterdir()):
        events = _raw_events(path)
        meta = json.load(gzip.open(path))["distributedInfo"]
        kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
        expected[meta["rank"]] = (len(kernels), sum(round(e["dur"] * 1000) for e in kernels))
    assert got == expected and len(got) == 8
    ranks = summary_ranks(conn)
    assert [r["rank"] for r in ranks] == list(range(8)) and {r["world_size"] for r in ranks} == {8}
    for r in ranks:  # the GPU time line's parts add up to the wall clock exactly
        assert r["compute_ns"] + r["exposed_communication_ns"] + r["memcpy_ns"] + r["idle_ns"] == r["wall_clock_ns"]
        assert 0 <= r["exposed_communication_ns"] <= r["communication_ns"]
    nccl = dict(conn.execute("SELECT rank, COUNT(*) FROM collectives GROUP BY rank").fetchall())
    assert nccl == {r: 8 for r in range(8)}  # 8 NCCL kernels per rank (SOURCES.md)
    assert sorted(r["straggler_rank"] for r in ranks) == list(range(1, 9))
    conn.close()


def test_collective_sizes_and_bandwidth_from_kernel_args(build_job):
    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    db = build_job([path])
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT collective, in_nelems, dtype, msg_bytes, dur_ns, group_size, algbw_gbps, busbw_gbps "
                        "FROM collectives WHERE rank = 0 ORDER BY start").fetchall()
    raw = sorted((e for e in _raw_events(path) if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                 key=lambda e: e["ts"])
    assert len(rows) == len(raw) == 21
    for row, e in zip(rows, raw):
        a = e["args"]
        assert row[0] == a["Collective name"] and row[1] == a["In msg nelems"] and row[5] == a["Group size"]
        assert row[2] == a["dtype"] and row[3] == a["In msg nelems"] * {"Float": 4, "Long": 8}[a["dtype"]]
        algbw = row[3] / (row[4] / 1e9) / 1e9
        assert row[6] == pytest.approx(algbw)
        factor = 2 * (2 - 1) / 2 if row[0] == "allreduce" else 1.0
        assert row[7] == pytest.approx(algbw * factor)
    conn.close()


def test_128_rank_sampled_pair(build_job):
    db = build_job([job(SAMPLED)])
    ranks = _summary(db)["ranks"]
    assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 128), (1, 128)]
    assert sorted(r["straggler_rank"] for r in ranks) == [1, 2]
    for r, path in zip(ranks, sorted(job(SAMPLED).iterdir())):
        kernels = [e for e in _raw_events(path) if e.get("cat") == "kernel"]
        nccl = [e for e in kernels if e["name"].startswith("nccl")]
        assert r["collective_count"] == len(nccl) == 10


def test_jax_four_processes_from_nvtx_csvs(build_job):
    folder = job(JAX)
    db = build_job([folder])
    conn = sqlite3.connect(db)
    counts = dict(conn.execute("SELECT rank, COUNT(*) FROM ranges GROUP BY rank").fetchall())
    colls = conn.execute("SELECT rank, collective, COUNT(*) FROM collectives GROUP BY rank, collective").fetchall()
    expected_ranges, expected_colls = {}, Counter()
    names = {"NCCL:ncclAllGather": "allgather", "NCCL:ncclReduceScatter": "reducescatter",
             "NCCL:ncclAllReduce": "allreduce"}
    for rank, path in enumerate(sorted(folder.iterdir())):
        with lzma.open(path, "rt") as f:
            rows = list(csv.DictReader(f))
        expected_ranges[rank] = len(rows)
        for row in rows:
            if row["Name"] in names:
                expected_colls[(rank, names[row["Name"]])] += 1
    assert counts == expected_ranges
    assert {(r, c): n for r, c, n in colls} == dict(expected_colls)
    ranks = summary_ranks(conn)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3] and all(r["gpu_utilization"] is None for r in ranks)
    assert all(r["compute_ns"] is None for r in ranks)  # range-only: nothing claimed about GPU time
    conn.close()


def test_nsys_stats_csv_bad_input(tmp_path):
    bad = tmp_path / "proc0.csv"
    bad.write_text("Start (ns),End (ns),Duration (ns),Name,PID,TID\n1,2,1,a,1,1\nx,2,1,b,1,1\n")
    assert looks_like_nsys_stats_csv(bad)
    with pytest.raises(InputError, match="line 3"):
        load_nsys_stats_csv(bad)
    assert not looks_like_nsys_stats_csv(data_file("kineto", "hta_event_sync_a100.json.gz"))


def test_nsys_stats_csv_times_are_the_written_integers():
    """Start/end of every range equal the CSV's text read with the csv module, row for row."""
    path = min(job(JAX).iterdir())
    with lzma.open(path, "rt") as f:
        rows = list(csv.DictReader(f))
    ranges = load_nsys_stats_csv(path).ranges
    assert ranges["start"].dtype == np.int64 and ranges["end"].dtype == np.int64
    assert list(zip(ranges["start"], ranges["end"])) == [(int(r["Start (ns)"]), int(r["End (ns)"])) for r in rows]


HEADER = "Start (ns),End (ns),Duration (ns),Name,PID,TID\n"


def test_nsys_stats_csv_epoch_ns_stay_exact_next_to_an_odd_cell(tmp_path):
    """One non-integer cell used to turn a whole column into float64 (epoch ns lose their last digits);
    now the cell is an error naming its line, and clean columns keep every digit."""
    exact = tmp_path / "exact.csv"
    exact.write_text(HEADER + "1700000000000000001,1700000000000000003,2,a,1,1\n"
                     " 9007199254740993 ,9007199254740995,2,b,1,1\n")
    ranges = load_nsys_stats_csv(exact).ranges
    assert list(ranges["start"]) == [1700000000000000001, 9007199254740993]  # neither is a float64
    assert list(ranges["end"]) == [1700000000000000003, 9007199254740995]
    odd = tmp_path / "odd.csv"
    odd.write_text(HEADER + "1700000000000000001,1700000000000000003,2,a,1,1\n12.5,13,0.5,b,1,1\n")
    with pytest.raises(InputError, match=r"line 3: column 'Start \(ns\)' is not an integer \('12.5'\)"):
        load_nsys_stats_csv(odd)
    huge = tmp_path / "huge.csv"
    huge.write_text(HEADER + "1,9223372036854775808,2,a,1,1\n")
    with pytest.raises(InputError, match=r"line 2: column 'End \(ns\)' does not fit int64"):
        load_nsys_stats_csv(huge)


# ------------------------------------------------------------------------------------------ same result


@pytest.mark.parametrize("folder, iter_start, iter_stop", [(DLRM, None, None), (SAMPLED, 552, 552)])
def test_job_wide_aggregation_equals_each_rank_aggregated_alone(folder, iter_start, iter_stop):
    """The kernel and op tables are grouped once over all ranks' rows and cut back per rank: every table and
    figure of every rank is the one that rank aggregated by itself gives (rows, order, dtypes)."""
    from dlscope.analyze.aggregation import aggregate, aggregate_ranks
    from dlscope.analyze.analysis import analyse

    an = analyse(load_profiles_parallel(expand_inputs([job(folder)]), workers=1))
    assert len(an.ranks) > 1
    together = aggregate_ranks(an, an.ranks, iter_start, iter_stop)
    for rank, agg in zip(an.ranks, together):
        # the rank picked out of the job, and the rank's analysis with no other rank's rows at all
        for alone in (aggregate(an, rank, iter_start, iter_stop),
                      aggregate(_one_rank(an, rank), rank, iter_start, iter_stop)):
            assert json.dumps(agg.row, sort_keys=True) == json.dumps(alone.row, sort_keys=True)
            for name in ("gpus", "iterations", "ops", "op_types", "kernels", "op_kernels", "groups"):
                pd.testing.assert_frame_equal(getattr(agg, name), getattr(alone, name), obj=f"rank {rank} {name}")
        assert len(agg.kernels) and len(agg.ops) and len(agg.groups)


def _one_rank(an, rank: int):
    """The job's analysis cut down to one rank's rows (what the rank's own analysis holds)."""
    from dlscope.analyze.analysis import Analysed
    from dlscope.model import Profile

    tables = {name: an.profile.table(name)[an.profile.table(name)["rank"] == rank] for name in an.RAW}
    return Analysed(Profile(**tables, meta=an.profile.meta), an.iterations[an.iterations["rank"] == rank],
                    {rank: an.iteration_methods[rank]}, an.key_node)


@pytest.mark.parametrize("folder, iter_start, iter_stop", [(DLRM, None, None), (SAMPLED, 552, 552)])
def test_job_wide_mfu_equals_each_rank_modelled_alone(folder, iter_start, iter_stop):
    """The ops of all ranks are modelled, summed per op node and their dominant precisions found in one pass
    (JobMFU): every rank's MFU figures and op-node FLOPs are the ones ``add_mfu`` of its own ops gives."""
    from dlscope.analyze.aggregation import JobAggregation
    from dlscope.analyze.analysis import analyse
    from dlscope.roofline.mfu import JobMFU, add_mfu

    an = analyse(load_profiles_parallel(expand_inputs([job(folder)]), workers=1))
    job_agg = JobAggregation(an, an.ranks, iter_start, iter_stop)
    mfu = JobMFU(an.profile.table("ops"), {r: (b[0], b[1]) for r, b in job_agg.bounds().items()},
                 {r: an.rank_tables(r)["gpus"] for r in an.ranks}, job_agg.tables.nodes)
    modelled = 0
    for rank in an.ranks:
        agg, tables = job_agg.aggregate(rank), an.rank_tables(rank)
        row, nodes = mfu.add(rank, agg.row, agg.ops)
        row_alone, nodes_alone = add_mfu(agg.row, agg.ops, tables["ops"], tables["gpus"])
        assert json.dumps(row, sort_keys=True) == json.dumps(row_alone, sort_keys=True)
        pd.testing.assert_frame_equal(nodes, nodes_alone, obj=f"rank {rank} op nodes")
        modelled += int((nodes["model_flops"].fillna(0) > 0).sum())
    assert modelled > 0  # op nodes with FLOPs: there are numbers to compare


@pytest.mark.parametrize("folder, iter_start, iter_stop", [(DLRM, None, None), (SAMPLED, 552, 552)])
def test_mfu_columns_added_to_the_job_op_nodes_once_equal_each_rank_modelled_alone(folder, iter_start, iter_stop):
    """The op nodes' FLOPs and MFU put on the job's op-node table once (``JobMFU.node_columns``, as the
    pipeline does): every rank's slice carries the columns ``add_mfu`` of its own ops gives, a rank without
    a model included (its FLOPs missing, as the rank alone gives)."""
    from dlscope.analyze.aggregation import JobAggregation
    from dlscope.analyze.analysis import analyse
    from dlscope.roofline.mfu import EXTRA_COLUMNS, JobMFU, add_mfu

    an = analyse(load_profiles_parallel(expand_inputs([job(folder)]), workers=1))
    job_agg = JobAggregation(an, an.ranks, iter_start, iter_stop)
    gpus = {r: an.rank_tables(r)["gpus"] for r in an.ranks}
    mfu = JobMFU(an.profile.table("ops"), {r: (b[0], b[1]) for r, b in job_agg.bounds().items()}, gpus,
                 job_agg.tables.nodes)
    job_agg.add_node_columns(mfu.node_columns())
    for rank in an.ranks:
        agg = job_agg.aggregate(rank)
        assert {"model_flops", "mfu", *EXTRA_COLUMNS} <= set(agg.ops.columns)  # in the slice, before add
        row, nodes = mfu.add(rank, agg.row, agg.ops)
        bare = agg.ops.drop(columns=["model_flops", "mfu", *EXTRA_COLUMNS])
        row_alone, nodes_alone = add_mfu(agg.row, bare, an.rank_tables(rank)["ops"], gpus[rank])
        assert json.dumps(row, sort_keys=True) == json.dumps(row_alone, sort_keys=True)
        pd.testing.assert_frame_equal(nodes, nodes_alone, obj=f"rank {rank} op nodes")
    # a rank with nothing to model: the same missing FLOPs and MFU as add_mfu gives it (no shapes recorded)
    ops = an.profile.table("ops")
    unshaped = ops.assign(input_shapes=np.where(ops["rank"].to_numpy() == an.ranks[0], None,
                                                ops["input_shapes"].to_numpy(dtype=object)))
    none = JobMFU(unshaped, {r: (b[0], b[1]) for r, b in job_agg.bounds().items()}, gpus, job_agg.tables.nodes)
    assert not none.modelled[0]
    columns = none.node_columns()
    first = job_agg.tables.nodes["rank"].to_numpy() == an.ranks[0]
    assert first.any() and pd.isna(np.asarray(columns["model_flops"][first], dtype=object)).all()
    assert np.isnan(columns["mfu"][first]).all()


@pytest.mark.parametrize("folder, iter_start, iter_stop", [(DLRM, None, None), (SAMPLED, 552, 552)])
def test_rules_frames_made_once_for_the_job_equal_each_rank_alone(folder, iter_start, iter_stop):
    """The rules' frames are projected once for all ranks and sliced per rank: every frame a rule reads is the
    rank's rows as its definition says (checked with plain pandas on the rank's raw table) and as the rank's
    tables alone give, and every rank's findings are the ones its tables alone give."""
    from dlscope.analyze.aggregation import JobAggregation
    from dlscope.analyze.analysis import analyse
    from dlscope.experts import Context, RuleFrames, evaluate, load_config

    an = analyse(load_profiles_parallel(expand_inputs([job(folder)]), workers=1))
    job_agg = JobAggregation(an, an.ranks, iter_start, iter_stop)
    frames = RuleFrames({name: an.profile.table(name) for name in an.RAW}, job_agg.bounds()).make_all()
    config = load_config(None)
    found = 0
    for rank in an.ranks:
        agg = job_agg.aggregate(rank)
        tables = an.rank_tables(rank)
        shared, alone = Context(config, tables, agg, frames), Context(config, tables, agg)
        assert shared.frames is frames and alone.frames is not frames
        lo, hi = agg.row["window_start"], agg.row["window_end"]
        raw = {name: an.profile.table(name) for name in ("kernels", "api_calls", "ranges", "ops")}
        raw = {name: frame[frame["rank"] == rank] for name, frame in raw.items()}
        for name in ("kernels", "api_calls"):  # the rank's rows in its iterations, by start (stable)
            t = raw[name]
            want = t[t["iteration"].between(agg.row["iter_start"], agg.row["iter_stop"])].sort_values(
                "start", kind="stable")
            assert getattr(shared, name)[f"{name[:-1] if name == 'kernels' else 'api'}_id"].tolist() == \
                want[f"{name[:-1] if name == 'kernels' else 'api'}_id"].tolist()
        r = raw["ranges"]
        want = r[(r["end"] > lo) & (r["start"] < hi) & (r["device"] < 0)].sort_values("start", kind="stable")
        assert shared.ranges["range_id"].tolist() == want["range_id"].tolist()
        o = raw["ops"]
        assert shared.ops["op_id"].tolist() == o.loc[o["iteration"].between(
            agg.row["iter_start"], agg.row["iter_stop"]), "op_id"].sort_values().tolist()
        for name in ("kernels", "memops", "api_calls", "ops", "ops_all", "gpu_activity", "ranges", "gpus", "memory",
                     "kernel_facts"):
            pd.testing.assert_frame_equal(getattr(shared, name), getattr(alone, name), obj=f"rank {rank} {name}")
        for kind in ("dataloader", "io"):
            assert shared.ops_named(kind).tolist() == alone.ops_named(kind).tolist()
        assert (shared.training_evidence, shared.framework, shared.has_gpu) == \
            (alone.training_evidence, alone.framework, alone.has_gpu)
        together = evaluate(tables, agg, None, frames)
        assert together == evaluate(tables, agg)
        found += len(together)
    assert found and len(shared.kernels) and len(shared.ops)


def test_serial_workers_and_dask_give_identical_databases(build_job):
    distributed = pytest.importorskip("distributed")
    folder = job(DLRM)
    serial = build_job([folder], "serial.sqlite", workers=1)
    pooled = build_job([folder], "pooled.sqlite", workers=2)
    with distributed.LocalCluster(n_workers=1, processes=False, protocol="tcp://", host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        dask = build_job([folder], "dask.sqlite", scheduler=cluster.scheduler_address)
    reference = _summary(serial)
    assert _summary(pooled) == reference and _summary(dask) == reference
    tables = _db_tables(serial)
    assert _db_tables(pooled) == tables and _db_tables(dask) == tables
    assert len(reference["ranks"]) == 8


def _rank_by_rank(monkeypatch) -> list:
    """Make every job under a budget go rank by rank, and record the ranks."""
    from dlscope.pipeline import rank_by_rank

    monkeypatch.setattr(pipeline, "whole_job_fits", lambda paths, budget: False)
    seen = []
    real = rank_by_rank.IdOffsets.shift
    monkeypatch.setattr(rank_by_rank.IdOffsets, "shift", lambda self, an: seen.append(1) or real(self, an))
    return seen


def test_a_job_under_a_memory_budget_is_imported_rank_by_rank_into_the_same_database(build_job, monkeypatch):
    folder = job(DLRM)
    whole = build_job([folder], "whole.sqlite", workers=2)
    seen = _rank_by_rank(monkeypatch)
    one_at_a_time = build_job([folder], "ranks.sqlite", max_memory="16GB")
    assert len(seen) == 8
    assert _db_tables(one_at_a_time, in_order=True) == _db_tables(whole, in_order=True)


@pytest.mark.parametrize("max_memory", [None, "16GB"])
def test_job_progress_counts_every_byte_and_event(tmp_path, monkeypatch, max_memory):
    """The progress bar of a job, whole or rank by rank: bytes of the files as stored, events decoded."""
    from contextlib import contextmanager

    calls = []

    @contextmanager
    def recording(enabled):
        yield lambda description, advance=1, total=None: calls.append((description, advance, total))

    monkeypatch.setattr(pipeline, "_progress", recording)
    folder = job(DLRM)
    pipeline.build_database([folder], tmp_path / "job.sqlite", workers=1, max_memory=max_memory)
    files = expand_inputs([folder])
    total = next(t for _, _, t in calls if t is not None)
    assert total >= sum(f.stat().st_size for f in files)
    assert sum(a for _, a, _ in calls) <= total
    read_bytes = sum(a for d, a, _ in calls if d.startswith("read"))
    assert read_bytes == sum(f.stat().st_size for f in files)
    events = sum(len(_raw_events(f)) for f in files)
    assert any(d == f"read 8/8 files, {events:,} events" for d, _, _ in calls)


@pytest.mark.parametrize("damage", ["gzip cut in the header", "JSON cut in the events"])
def test_a_bad_rank_fails_a_rank_by_rank_import_with_one_line_and_no_file(tmp_path, monkeypatch, damage):
    folder, out = tmp_path / "job", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    good = sorted(job(DLRM).iterdir())
    (folder / "rank-0.json.gz").write_bytes(good[0].read_bytes())
    if damage.startswith("gzip"):
        (folder / "rank-1.json.gz").write_bytes(good[1].read_bytes()[:2000])
    else:  # written after a good rank: the database already has rows when this one fails
        text = gzip.decompress(good[1].read_bytes())
        (folder / "rank-1.json.gz").write_bytes(gzip.compress(text[: len(text) // 2]))
    _rank_by_rank(monkeypatch)
    with pytest.raises(InputError, match=r"rank-1.json.gz: is (a truncated or corrupt gzip file|not valid JSON)"):
        pipeline.build_database([folder], out / "job.sqlite", progress=False, max_memory="16GB")
    assert list(out.iterdir()) == []


def test_a_job_that_fits_its_budget_whole_is_imported_whole(build_job, monkeypatch):
    from dlscope.pipeline import rank_by_rank

    seen = []
    real = rank_by_rank.IdOffsets.shift
    monkeypatch.setattr(rank_by_rank.IdOffsets, "shift", lambda self, an: seen.append(1) or real(self, an))
    build_job([job(DLRM)], "whole.sqlite", max_memory="16GB")  # 8 MB of JSON: surely fits
    assert seen == []
    monkeypatch.setattr(budget, "MOST_TABLE_BYTES_PER_JSON_BYTE", 10**4)  # as if its ranks were huge
    build_job([job(DLRM)], "ranks.sqlite", max_memory="16GB")
    assert len(seen) == 8


@pytest.mark.slow
def test_ranks_on_unrelated_clocks_give_the_same_database_whole_or_rank_by_rank(build_job, monkeypatch, tmp_path):
    """Real traces of different machines and eras as the ranks of one job: clocks 10^18 ns apart, profiler
    steps or none, ranges promoted to ops, range-only ranks. Nothing may depend on how the job was cut."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i, name in enumerate(["tracelens_mi300x_xdit_sd35_infer.json.gz", "hta_cpu_only_no_gpu.pt.trace.json.gz",
                              "hta_legacy_format_inference_rank1.json.gz", "hta_a100_nccl_rank0of2_3steps.json.gz",
                              "deepseek_h800_train_ep64_rank0.json.gz", "tracelens_b200_llm_serving_rank0of8.json.gz"]):
        (folder / f"rank-{i}.json.gz").symlink_to(data_file("kineto", name))
    whole = build_job([folder], "whole.sqlite", workers=1)
    seen = _rank_by_rank(monkeypatch)
    one_at_a_time = build_job([folder], "ranks.sqlite", max_memory="16GB")
    assert len(seen) == 6
    assert _db_tables(one_at_a_time, in_order=True) == _db_tables(whole, in_order=True)
    for rank, name in ((0, "tracelens_mi300x_xdit_sd35_infer.json.gz"), (4, "deepseek_h800_train_ep64_rank0.json.gz"),
                       (5, "tracelens_b200_llm_serving_rank0of8.json.gz")):
        alone = build_job([data_file("kineto", name)], f"alone{rank}.sqlite")
        for table in ("iterations", "aggregations"):
            with sqlite3.connect(alone) as a, sqlite3.connect(whole) as w:
                cols = "iteration, start, cpu_end, \"end\"" if table == "iterations" else \
                    "wall_clock_ns, gpu_busy_ns, kernel_count, kernel_time_ns, op_count, iteration_method"
                assert a.execute(f"SELECT {cols} FROM {table}").fetchall() == \
                    w.execute(f"SELECT {cols} FROM {table} WHERE rank = ?", (rank,)).fetchall(), table


@pytest.mark.slow
def test_dask_cluster_of_processes_on_loopback(build_job):
    distributed = pytest.importorskip("distributed")
    folder = job(JAX)
    serial = build_job([folder], "serial.sqlite", workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1")
        dask = build_job([folder], "dask.sqlite", scheduler=cluster.scheduler_address)
    assert _summary(dask) == _summary(serial) and _db_tables(dask) == _db_tables(serial)


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line_error():
    with pytest.raises(DlscopeError, match="cannot connect"):
        load_profiles_parallel([data_file("kineto", "hta_event_sync_a100.json.gz")], scheduler="tcp://127.0.0.1:9")


# ------------------------------------------------------------------------------------------ streaming


@pytest.mark.parametrize("name", ["hta_a100_nccl_rank0of2_3steps.json.gz",
                                  "hta_trace_diff_control_a100_rank3of8.json.gz",
                                  "hta_legacy_format_inference_rank1.json.gz"])
def test_streaming_import_builds_identical_tables(name):
    from dlscope.importers.kineto import load_kineto

    path = data_file("kineto", name)
    whole = load_kineto(path)
    seen = []
    streamed = load_kineto(path, max_memory=1, progress=lambda b, e: seen.append((b, e)))
    for table in ("ops", "ranges", "api_calls", "kernels", "memops", "syncs", "memory", "gpus"):
        assert_same_rows(whole.table(table), streamed.table(table), table)
    assert_same_rows(whole.comm_args, streamed.comm_args, "comm_args")
    assert whole.meta == streamed.meta
    assert seen[-1] == (path.stat().st_size, whole.meta["event_count"])
    assert all(np.diff([b for b, _ in seen]) >= 0)


@pytest.mark.parametrize("reader", ["streamed", "ijson"])
def test_streamed_and_in_memory_imports_give_the_same_summary(build_job, reader):
    """ijson's row ids follow its decoding batches; every figure computed from the rows must not."""
    from dlscope.importers.kineto import Reading

    path = data_file("kineto", "hta_a100_nccl_rank0of2_3steps.json.gz")
    whole = build_job([path], "whole.sqlite")
    streamed = build_job([path], "streamed.sqlite", max_memory="8GB", reading=Reading(method=reader))
    assert _summary(streamed) == _summary(whole)


def test_an_analysis_larger_than_the_memory_budget_is_refused_before_writing(tmp_path):
    from dlscope.importers.kineto import estimated_json_size
    from dlscope.pipeline.budget import (
        ANALYSIS_FIXED_BYTES,
        ANALYSIS_PEAK_FACTOR,
        LEAST_TABLE_BYTES_PER_JSON_BYTE,
        analysis_memory,
    )
    from dlscope.pipeline.executors import import_file

    path = data_file("kineto", "hta_v100_rank1of2_5steps.json.gz")
    profile = import_file(str(path))
    tables = sum(int(profile.table(t).memory_usage(deep=True).sum()) for t in ("ops", "api_calls", "kernels"))
    needed = analysis_memory(profile)
    assert needed > 400 * 2**20 + 4 * tables  # a fixed part plus a multiple of the tables' size
    least = ANALYSIS_FIXED_BYTES + ANALYSIS_PEAK_FACTOR * LEAST_TABLE_BYTES_PER_JSON_BYTE * estimated_json_size(path)
    assert least < needed
    out = tmp_path / "refused.sqlite"
    # far too small: refused from the file's size alone, before reading it
    with pytest.raises(DlscopeError, match=r"hta_v100_rank1of2_5steps.json.gz: analysing at least 54 MB of trace "
                                           r"JSON needs at least about \d+ MB of memory, "
                                           r"more than --max-memory 300 MB"):
        pipeline.build_database([path], out, max_memory="300MB", progress=False)
    # too small for these tables: refused after the parse, from the imported tables
    with pytest.raises(DlscopeError, match=r"hta_v100_rank1of2_5steps.json.gz: analysing [\d,]+ imported rows needs "
                                           r"about \d+ MB of memory, more than --max-memory \d+ MB"):
        pipeline.build_database([path], out, max_memory=int((least + needed) / 2), progress=False)
    assert list(tmp_path.iterdir()) == []
    pipeline.build_database([path], out, max_memory=needed + 1, progress=False)
    assert out.exists()


def test_streaming_is_chosen_by_the_memory_budget():
    from dlscope.importers.kineto import estimated_json_size, should_stream

    path = data_file("kineto", "hta_v100_rank1of2_5steps.json.gz")
    size = estimated_json_size(path)
    with gzip.open(path) as f:
        assert size == len(f.read())
    assert should_stream(path, 2 * size) and not should_stream(path, 4 * size)


def test_streaming_reports_truncated_files(tmp_path):
    from dlscope.importers.kineto import load_kineto

    data = gzip.decompress(data_file("kineto", "hta_event_sync_a100.json.gz").read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="not valid JSON"):
        load_kineto(cut, max_memory=1)


def test_gpu_time_line_parts_of_all_ranks_at_once_hand_computed():
    """Three aggregations: rank 0 (a compute kernel, an NCCL kernel half under it, a copy, all cut to the
    window), rank 1 (range-only: no GPU activity, so none claimed), rank 5 (one kernel outside its window: all
    idle); rank 9's kernel belongs to no aggregation. Two aggregations of one rank are each their own."""
    from types import SimpleNamespace

    from dlscope.distributed.figures import _job_gpu_parts

    kernels = pd.DataFrame({"rank": [0, 0, 0, 5, 9], "start": [0, 50, 150, 500, 0], "end": [100, 150, 250, 600, 99],
                            "name": ["gemm", "ncclDevKernel_AllReduce_Sum", "relu", "gemm", "gemm"]})
    memops = pd.DataFrame({"rank": [0, 0], "start": [90, 290], "end": [120, 320]})
    tables = {"kernels": kernels, "memops": memops}
    an = SimpleNamespace(profile=SimpleNamespace(table=tables.__getitem__),
                         rank_tables=lambda r: {n: t[t["rank"] == r] for n, t in tables.items()})

    def agg(rank, lo, hi):
        return SimpleNamespace(row={"rank": rank, "window_start": lo, "window_end": hi})

    parts = _job_gpu_parts(an, [agg(5, 0, 100), agg(0, 10, 300), agg(1, 0, 50)])
    # rank 0 in [10, 300): compute [10,100) + [150,250) = 190; NCCL [50,150) = 100, of it [100,150) not under
    # compute = 50; kernels [10,250) = 240; copies [90,120) under kernels, [290,300) not: 10; idle 290 - 250 = 40
    assert parts == [{"compute_ns": 0, "communication_ns": 0, "exposed_communication_ns": 0, "memcpy_ns": 0,
                      "idle_ns": 100},
                     {"compute_ns": 190, "communication_ns": 100, "exposed_communication_ns": 50, "memcpy_ns": 10,
                      "idle_ns": 40},
                     None]
    twice = _job_gpu_parts(an, [agg(0, 10, 300), agg(0, 0, 60)])
    # the second window [0, 60): compute [0,60) = 60, NCCL [50,60) all under it, no copy past the kernels
    assert twice[1] == {"compute_ns": 60, "communication_ns": 10, "exposed_communication_ns": 0, "memcpy_ns": 0,
                        "idle_ns": 0} and twice[0] == parts[1]


def test_rank_tables_are_each_rank_rows_in_table_order_whether_the_tables_follow_the_ranks_or_not():
    """``Analysed.rank_tables`` (cut out on first read): every table of every rank, its row count and columns
    read without the frame, are what a boolean mask on the rank column gives (rows, order, index labels,
    dtypes), for the job's tables as imported, shuffled, of one rank only, and empty; a rank the job does not
    have gets empty tables."""
    from dlscope.analyze.analysis import Analysed, analyse
    from dlscope.model import Profile

    an = analyse(load_profiles_parallel(expand_inputs([job(DLRM)]), workers=1))
    rng = np.random.default_rng(7)
    shuffled = {name: an.profile.table(name).iloc[rng.permutation(len(an.profile.table(name)))] for name in an.RAW}
    one = {name: an.profile.table(name)[an.profile.table(name)["rank"] == 3] for name in an.RAW}
    cases = [an, Analysed(Profile(**shuffled, meta=an.profile.meta), an.iterations),
             Analysed(Profile(**one, meta=an.profile.meta), an.iterations), Analysed(Profile(), an.iterations)]
    for case in cases:
        for rank in [*range(8), 99]:
            tables = case.rank_tables(rank)
            assert list(tables) == list(an.RAW)
            for name in an.RAW:
                whole = case.profile.table(name)
                mine = whole[whole["rank"].to_numpy() == rank]
                pd.testing.assert_frame_equal(tables[name], mine, obj=f"rank {rank} {name}")
                assert tables.rows(name) == len(mine)
                for column in ("rank", "start") if "start" in whole.columns else ("rank",):
                    assert tables.column(name, column).tolist() == mine[column].tolist()
    assert len(an.rank_tables(0)["kernels"]) and len(cases[1].rank_tables(5)["ops"])


def test_a_rule_context_iteration_columns_are_the_profiled_iterations_in_order_made_once_and_read_only():
    from dlscope.analyze.aggregation import JobAggregation
    from dlscope.analyze.analysis import analyse
    from dlscope.experts import Context, load_config

    an = analyse(load_profiles_parallel(expand_inputs([job(DLRM)]), workers=1))
    job_agg = JobAggregation(an, an.ranks)
    for rank in an.ranks:
        agg = job_agg.aggregate(rank)
        ctx = Context(load_config(None), an.rank_tables(rank), agg)
        its = agg.iterations[agg.iterations["profiled"].astype(bool)].sort_values("iteration", kind="stable")
        for column in ("iteration", "start", "end", "dataloader_ns"):
            got = ctx.iteration_col(column)
            assert got.tolist() == its[column].tolist() and len(got)
            assert ctx.iteration_col(column) is got and not got.flags.writeable
