"""The replay on every real profile with iterations: it must give each measured iteration back (checked
against the windows read from the raw JSON by tests/raw_kineto.py, no dlscope code), its critical path must
cover each window exactly, the vectorized replay must equal a plain longest-path computation under changed
weights, and the validation pair's prediction must stay within the error measured for it (docs/whatif.md).
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from conftest import DATA, data_file, requires_shared
from raw_kineto import (
    KERNEL_CATS,
    LAUNCH_CATS,
    MEMOP_CATS,
    OP_CATS,
    events,
    is_step_marker,
)

from dlscope.store import reader
from dlscope.whatif import whatif

# single-rank Kineto traces whose iterations are ProfilerSteps
PROFILER_STEP_FILES = [
    "deepseek_h800_train_ep64_rank0.json.gz", "hta_a100_80gb_rank0of16_5steps.json.gz",
    "hta_a100_nccl_rank0of2_3steps.json.gz", "hta_cpu_only_no_gpu.pt.trace.json.gz", "hta_event_sync_a100.json.gz",
    "hta_trace_diff_control_a100_rank3of8.json.gz", "hta_trace_diff_test_v100_rank1of2.json.gz",
    "hta_triton_a100.json.gz", "hta_v100_ns_resolution_5steps.pt.trace.json.gz", "hta_v100_rank1of2_5steps.json.gz",
    "tbplugin_resnet50_v100_workers0.pt.trace.json.gz", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz",
    "tracelens_h100_bert_small_infer.json.gz", "tracelens_h100_qwen1.5_0.5b_infer.json.gz",
    "tracelens_h100_vit_nsfw_infer.json.gz", "tracelens_mi300x_xdit_sd35_infer.json.gz",
]
JOBS = ["param_dlrm_8rank_v100", "hta_128rank_sampled"]
#: iterations found as a repeating op sequence: compared with the aggregation's own windows
REPEATING = [("kineto", "hta_event_sync_multistream_a100.json.gz"),
             ("nsys_sqlite", "pipit_saxpy_mpi_nvtx_a100_nsys2022.2.sqlite")]


def raw_windows(path) -> list[int]:
    """Each ProfilerStep's window from the raw JSON: to the next step's start; the last to the end of its own
    activity (its range, the ops starting in it, the GPU work whose launch call starts in it)."""
    evs = events(path)
    steps = sorted({e.name: e for e in evs if e.name.startswith("ProfilerStep#") and is_step_marker(e.name)
                    and e.cat != "gpu_user_annotation"}.values(), key=lambda e: e.start)
    last = steps[-1]
    end = last.end
    calls: dict = {}
    for e in evs:
        if e.cat in LAUNCH_CATS and e.correlation is not None:
            calls.setdefault(e.correlation, e)
    for e in evs:
        if e.cat in OP_CATS and not is_step_marker(e.name) and last.start <= e.start < last.end:
            end = max(end, e.end)
        if e.cat in KERNEL_CATS | MEMOP_CATS and e.correlation in calls and \
                last.start <= calls[e.correlation].start < last.end:
            end = max(end, e.end)
    return [b.start - a.start for a, b in pairwise(steps)] + [end - last.start]


def _agg_ids(db) -> list[tuple[int, int]]:
    conn = reader.connect(db)
    try:
        return conn.execute("SELECT agg_id, rank FROM aggregations ORDER BY rank").fetchall()
    finally:
        conn.close()


def _check(result: dict, expected: list[int]) -> None:
    """The measured windows are the raw ones (to the ns: µs written with more than 3 decimals round either way
    in the oracle and in the importer), and the replay gives each back exactly."""
    its = result["replay"]["iterations"]
    measured = [x["measured_ns"] for x in its]
    assert np.abs(np.array(measured) - np.array(expected)).max() <= 1
    assert [x["replayed_ns"] for x in its] == measured      # 0% error on every iteration
    # the critical path's categories add up to the replayed wall clock
    total = sum(x["time_ns"] for x in result["critical_path"] if x["kind"] == "category")
    assert total == sum(measured)


@requires_shared
@pytest.mark.parametrize("name", PROFILER_STEP_FILES)
def test_replay_gives_every_profiler_step_back(name, import_db):
    path = data_file("kineto", name)
    db = import_db(path)
    (agg_id, _), = _agg_ids(db)
    _check(whatif(db, [], agg_id), raw_windows(path))


@requires_shared
@pytest.mark.parametrize("job", JOBS)
def test_replay_gives_every_rank_of_a_job_its_steps_back(job, import_db):
    folder = data_file("kineto", job)
    db = import_db(folder)
    files = sorted(folder.glob("*.json.gz"))
    for (agg_id, _rank), path in zip(_agg_ids(db), files):
        _check(whatif(db, [], agg_id), raw_windows(path))


@requires_shared
@pytest.mark.parametrize("folder,name", REPEATING)
def test_replay_gives_repeating_pattern_iterations_back(folder, name, import_db):
    db = import_db(data_file(folder, name))
    (agg_id, _), = _agg_ids(db)
    conn = reader.connect(db)
    try:
        expected = [r[0] for r in conn.execute("SELECT duration_ns FROM agg_iterations WHERE agg_id = ? AND profiled "
                                               "ORDER BY start", (agg_id,))]
    finally:
        conn.close()
    _check(whatif(db, [], agg_id), expected)


# ------------------------------------------------------------------------------------------ the replay


def _naive_longest_paths(g, w) -> np.ndarray:
    """Plain longest paths in topological order (Kahn), one vertex at a time: the oracle of the replay."""
    from collections import deque

    n = g.n
    seg_start = g.first | w.cut
    preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for v in np.flatnonzero(~seg_start).tolist():
        preds[v].append((v - 1, int(w.wc[v])))
    on = ~w.off
    for s, d, x in zip(g.src[on].tolist(), g.dst[on].tolist(), w.wx[on].tolist()):
        preds[d].append((s, x))
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for v, p in enumerate(preds):
        for u, _ in p:
            succ[u].append(v)
    t = [0] * n
    queue = deque(v for v in range(n) if indeg[v] == 0)
    done = 0
    while queue:
        v = queue.popleft()
        done += 1
        t[v] = max((t[u] + x for u, x in preds[v]), default=int(g.t[v]))
        for s in succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(s)
    assert done == n, "the graph has a cycle"
    return np.array(t, np.int64)


@requires_shared
@pytest.mark.parametrize("name", ["kineto/hta_event_sync_multistream_a100.json.gz",
                                  "nsys_sqlite/dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite",
                                  "kineto/param_dlrm_8rank_v100",
                                  "kineto/tbplugin_resnet50_v100_workers0.pt.trace.json.gz"])
def test_the_vectorized_replay_equals_plain_longest_paths_under_random_weights(name):
    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.pipeline.inputs import expand_inputs
    from dlscope.whatif.graph import build
    from dlscope.whatif.job import from_analysed
    from dlscope.whatif.replay import Weights, solve, unchanged

    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    g = build(from_analysed(analyse(load_profiles_parallel(expand_inputs([path]), 1, None, None,
                                                           lambda *a, **k: None))))
    rng = np.random.default_rng(19)
    for trial in range(3):
        w = Weights.measured(g)
        if trial:
            w.wc = np.rint(w.wc * rng.uniform(0, 2, g.n)).astype(np.int64)
            w.wx = np.rint(w.wx * rng.uniform(0, 2, len(w.wx))).astype(np.int64)
            w.off |= rng.random(len(w.off)) < 0.05
            w.cut |= rng.random(g.n) < 0.01
        got = solve(g, w).t
        want = _naive_longest_paths(g, w)
        assert np.array_equal(got, want), trial
        if trial == 0:
            assert np.array_equal(got, g.t)  # unchanged: the measured times
            assert np.array_equal(unchanged(g).t, want)  # checked as the fixed point, not swept
        # swept from other times (the measured ones, as the import does; any others): the same longest paths
        assert np.array_equal(solve(g, w, start=g.t).t, want), trial
        assert np.array_equal(solve(g, w, start=rng.permutation(g.t)).t, want), trial
    # a graph whose measured times are not its fixed point (heavier chain edges): the check sends it to a sweep
    heavier = replace(g, wc=g.wc * 2, memo={})
    want = _naive_longest_paths(heavier, Weights.measured(heavier))
    assert not np.array_equal(want, g.t)
    assert np.array_equal(unchanged(heavier).t, want)


@requires_shared
@pytest.mark.parametrize("gather", [7, 16])
def test_times_gathered_a_slice_at_a_time_are_the_longest_paths(gather, monkeypatch):
    """The replay gathers each vertex's offset and time from its head a slice at a time (``GATHER`` vertices):
    slices that split the graph anywhere (a prime size, a power of two) give the longest paths, in the
    scratch replay too (its weights' array reused for the times)."""
    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.pipeline.inputs import expand_inputs
    from dlscope.whatif import replay
    from dlscope.whatif.graph import build
    from dlscope.whatif.job import from_analysed
    from dlscope.whatif.replay import Weights, solve

    path = DATA / "kineto/hta_event_sync_multistream_a100.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    g = build(from_analysed(analyse(load_profiles_parallel(expand_inputs([path]), 1, None, None,
                                                           lambda *a, **k: None))))
    monkeypatch.setattr(replay, "GATHER", gather)
    assert g.n > 3 * gather  # several slices, the last one partial
    rng = np.random.default_rng(23)
    w = Weights.measured(g)
    w.wc = np.rint(w.wc * rng.uniform(0, 2, g.n)).astype(np.int64)
    w.off |= rng.random(len(w.off)) < 0.05
    w.cut |= rng.random(g.n) < 0.01
    want = _naive_longest_paths(g, w)
    assert not np.array_equal(want, g.t)
    assert np.array_equal(solve(g, w, start=g.t).t, want)
    assert np.array_equal(solve(g, w, scratch=True).t, want)


@requires_shared
def test_each_vertex_chain_derived_from_the_chain_starts_is_its_thread_or_stream():
    """The graph keeps only where chains start and derives each vertex's chain: it must name the vertex's own
    rank, and for GPU activities their own device and stream (every chain has vertices, numbered in order)."""
    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.pipeline.inputs import expand_inputs
    from dlscope.whatif.graph import BARRIER, GPU_END, GPU_START, build
    from dlscope.whatif.job import from_analysed

    path = DATA / "kineto/param_dlrm_8rank_v100"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    g = build(from_analysed(analyse(load_profiles_parallel(expand_inputs([path]), 1, None, None,
                                                           lambda *a, **k: None))))
    chain = g.chain
    chains = g.chains.set_index("chain")
    assert sorted(set(chain.tolist())) == chains.index.tolist()
    assert np.array_equal(chains["rank"].to_numpy(np.int64)[chain], g.rank)
    assert np.array_equal(chains["is_gpu"].to_numpy(bool)[chain], np.isin(g.kind, [GPU_START, GPU_END, BARRIER]))
    act = g.activities
    for v in ("start_v", "end_v"):
        at = chain[act[v].to_numpy(np.int64)]
        for col in ("device", "stream"):
            assert np.array_equal(chains[col].to_numpy(np.int64)[at], act[col].to_numpy(np.int64)), (v, col)


@requires_shared
def test_scenarios_replayed_from_the_unchanged_replay_are_the_longest_paths_of_their_weights():
    from dlscope.analyze.analysis import analyse
    from dlscope.pipeline.executors import load_profiles_parallel
    from dlscope.pipeline.inputs import expand_inputs
    from dlscope.whatif.graph import build
    from dlscope.whatif.job import from_analysed
    from dlscope.whatif.replay import Weights, solve
    from dlscope.whatif.scenarios import parse

    path = DATA / "kineto/param_dlrm_8rank_v100"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    g = build(from_analysed(analyse(load_profiles_parallel(expand_inputs([path]), 1, None, None,
                                                           lambda *a, **k: None))))
    base = solve(g, Weights.measured(g), start=g.t)
    for name in ("no-dataloader", "cuda-graphs", "no-sync", "overlap-comm", "no-straggler", "amp=0.5"):
        w = Weights.measured(g)
        parse(name).apply(g, w)
        assert np.array_equal(solve(g, w, start=base.t).t, _naive_longest_paths(g, w)), name


# ------------------------------------------------------------------------------------------ validation pair


@requires_shared
def test_predicting_four_workers_from_none_stays_within_its_measured_error(import_db):
    """ResNet-50 on a V100 with 0 and 4 DataLoader workers (177.59 -> 141.09 ms, measured). Removing the
    data-loading wait from the first predicts 118.61 ms: 15.9% under the second, whose CPU work on the critical
    path grew by a quarter (95 -> 119 ms a step) with four worker processes competing for the cores, and whose
    steps 5 and 9 stalled (181.6 and 163.5 ms) for reasons no data-loading wait explains (docs/whatif.md).
    The test holds the prediction to the error measured, 16%, and to its direction: the model cannot see
    contention."""
    w0 = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"))
    w4 = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers4.pt.trace.json.gz"))
    measured = whatif(w4, [])["baseline_iteration_ns"]
    assert round(measured / 1e4) == 14109          # 141.09 ms, as the issue measured
    r = whatif(w0, ["no-dataloader"])
    assert round(r["baseline_iteration_ns"] / 1e4) == 17759
    predicted = r["scenarios"][0]["predicted_iteration_ns"]
    error = (predicted - measured) / measured
    assert -0.16 <= error < 0
