"""Each rank's aggregation (with its MFU) and expert findings; a job of many ranks spreads them over forked workers.

The aggregation tables and the MFU of every rank are computed once, in the parent (:class:`JobAggregation`,
:class:`JobMFU`: the rank in every key), so each rank's are slices and look-ups; what is left per rank, its
rules, is ~9 ms a rank plus ~0.5 µs a row, so a job whose ranks add up to more than forking costs spreads it
over workers forked after the analysis, which read it copy-on-write; only each rank's small results travel back
(pickled). Results come back in rank order, so the database is the same however many workers ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..analyze.aggregation import Aggregation, JobAggregation
from ..analyze.analysis import Analysed
from ..experts import RuleFrames, evaluate
from ..processes import can_fork, release_free_memory, stop_pool, worker_pool
from ..roofline.mfu import JobMFU

#: What each rank's share costs after the job-wide aggregation (rules, slices, MFU look-ups), and the least
#: estimated work for which forked workers pay: forking 2 workers and pickling their results back cost ~0.5 s
#: of CPU. Measured 2026-11-27 (bench/README.md, "Per-rank workers only where they pay"): the 64-rank job
#: (211k rows, 0.6 s of per-rank work) ran 4.67-4.90 s serial against 4.80-5.20 s forked.
SECONDS_PER_RANK = 0.009
SECONDS_PER_ROW = 0.5e-6
MIN_PARALLEL_SECONDS = 1.0

_FORKED: tuple | None = None  # what the forked workers read (inherited, not pickled)


def aggregate_ranks(an: Analysed, iter_start: int | None, iter_stop: int | None, rules_config=None,
                    workers: int | None = None, ranks: list[int] | None = None,
                    aggregated: Callable[[list[Aggregation]], None] | None = None,
                    evaluated: Callable[[Aggregation, list[dict]], None] | None = None
                    ) -> list[tuple[Aggregation, list[dict]]]:
    """(aggregation, findings) of every rank of ``an`` (or of ``ranks``), in rank order.

    ``workers``: processes to use (default: the machine's cores when the ranks' estimated work is at least
    ``MIN_PARALLEL_SECONDS``, else 1). ``aggregated``: called with every rank's aggregation before the rules
    run, where they run here (the import starts writing the aggregation tables then; the rules only read them).
    ``evaluated``: called with each rank's aggregation and findings as soon as its rules are done, in rank
    order, where they run here (the import's replay child prices them beside the next ranks' rules).
    """
    ranks = an.ranks if ranks is None else ranks
    rows = sum(len(an.profile.table(name)) for name in an.RAW)
    n = _worker_count(len(ranks), rows, workers)
    job = JobAggregation(an, ranks, iter_start, iter_stop)
    flops = JobMFU(an.profile.table("ops"), {r: (b[0], b[1]) for r, b in job.bounds().items()},
                   {r: an.rank_tables(r)["gpus"] for r in ranks}, job.tables.nodes)
    job.add_node_columns(flops.node_columns())  # every rank's op nodes with their FLOPs and MFU, in one pass
    bounds = job.bounds()
    if n <= 1:
        aggs = [_rank_aggregation(job, flops, rank) for rank in ranks]
        # the job-wide tables made for the aggregations (op nodes, kernel summaries, windows, row maps: ~10 MiB of
        # the benchmark trace, ~0.2x the imported tables of a big one) let go before the rules' frames are made:
        # the rules read the aggregations, not them
        del job, flops
        if aggregated is not None:
            aggregated(aggs)
        frames = RuleFrames({name: an.profile.table(name) for name in an.RAW}, bounds).make_all()
        results = []
        for rank, agg in zip(ranks, aggs):
            results.append((agg, _evaluated(an, agg, rank, frames, rules_config)))
            if evaluated is not None:
                evaluated(*results[-1])
        return results
    frames = RuleFrames({name: an.profile.table(name) for name in an.RAW}, bounds).make_all()
    an.rank_tables(ranks[0])  # split the tables by rank once, before forking, so every worker inherits it
    release_free_memory()
    global _FORKED
    _FORKED = (an, job, flops, frames, rules_config)
    pool = worker_pool(n, "fork")
    try:
        results = list(pool.map(_forked_rank, ranks, chunksize=max(1, len(ranks) // (4 * n))))
        pool.shutdown()
        return results
    finally:
        stop_pool(pool)  # on a failure or an interrupt: the workers are killed, not awaited
        _FORKED = None


def _worker_count(ranks: int, rows: int, workers: int | None) -> int:
    if not can_fork():
        return 1
    if workers is None:
        work = ranks * SECONDS_PER_RANK + rows * SECONDS_PER_ROW
        workers = (os.cpu_count() or 1) if ranks > 1 and work >= MIN_PARALLEL_SECONDS else 1
    return max(1, min(workers, ranks))


def _forked_rank(rank: int) -> tuple[Aggregation, list[dict]]:
    assert _FORKED is not None  # set by the parent before it forked this worker
    an, job, flops, frames, rules_config = _FORKED
    return _rank_results(an, job, flops, frames, rank, rules_config)


def _rank_aggregation(job: JobAggregation, flops: JobMFU, rank: int) -> Aggregation:
    agg = job.aggregate(rank)
    agg.row, agg.ops = flops.add(rank, agg.row, agg.ops)
    return agg


def _rank_results(an: Analysed, job: JobAggregation, flops: JobMFU, frames: RuleFrames, rank: int,
                  rules_config) -> tuple[Aggregation, list[dict]]:
    agg = _rank_aggregation(job, flops, rank)
    return agg, _evaluated(an, agg, rank, frames, rules_config)


def _evaluated(an: Analysed, agg: Aggregation, rank: int, frames: RuleFrames, rules_config) -> list[dict]:
    """The rank's findings; its aggregation row records the tolerance that told whether its iterations are timed
    on the GPU, so the summary times them as the rules did (``--rules-config`` included)."""
    agg.row["gpu_timing_tolerance"] = float(frames.rules_config(rules_config)["iteration_variance"]["tolerance"])
    return evaluate(an.rank_tables(rank), agg, rules_config, frames)
