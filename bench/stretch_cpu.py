"""CPU seconds of the import's main-thread steps beside the raw writer, trees alternated: ``aggregate_ranks``,
``rank_figures``, the replay (``Replay.__init__``, then ``Replay.figures``) and ``timeline_arrays``, each run
in the import's order on a fresh analysis of the parse (the cyclic GC paused, as in the import). Both trees must
agree: a hash of the aggregations, findings, rank figures, replay figures and timeline bytes is printed per tree.

    python bench/stretch_cpu.py TRACE --tree /work/ref11/src --tree src [--rounds 3] [--repeat 3]
    python bench/stretch_cpu.py TRACE --tree src --profile STEP [--sort tottime]   # cProfile of one step

The input is parsed once (by the first tree) into a pickle. Each round runs every tree in its own interpreter
(``PYTHONPATH=TREE``), which times each step ``--repeat`` times with ``time.process_time``; each line is the best
of the repeats, the summary the best over the rounds.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from main_thread_cpu import parse_to_pickle  # noqa: E402 - a bench script beside this one

STEPS = ("aggregate_ranks", "rank_figures", "replay_init", "replay_figures", "timeline_arrays")


def _hash_value(h, value) -> None:
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        h.update(repr(value.dtypes.to_dict()).encode())
        h.update(repr(list(value.index)).encode())
        for column in value.columns:
            h.update(repr(column).encode())
            h.update(pickle.dumps(value[column].tolist()))
    elif isinstance(value, pd.Series):
        h.update(pickle.dumps(value.tolist()))
    elif isinstance(value, np.ndarray):
        h.update(pickle.dumps(value.tolist()))
    elif isinstance(value, dict):
        for k in sorted(value, key=repr):
            h.update(repr(k).encode())
            _hash_value(h, value[k])
    elif isinstance(value, (list, tuple)):
        for v in value:
            _hash_value(h, v)
    elif isinstance(value, (bytes, bytearray)):
        h.update(bytes(value))
    else:
        h.update(repr(value).encode())


def _digest(value) -> str:
    h = hashlib.sha1()
    _hash_value(h, value)
    return h.hexdigest()[:16]


def _aggs_value(aggs) -> list:
    return [{k: v for k, v in vars(a).items()} for a in aggs]


def _one_run(data: bytes, profile: str | None, sort: str, digest: bool) -> tuple[dict[str, float], dict[str, str]]:
    """One analysis of the parse, then each step in the import's order: CPU seconds per step (and hashes)."""
    from dlscope.analyze.analysis import analyse
    from dlscope.distributed.figures import rank_figures
    from dlscope.pipeline.build import timeline_arrays
    from dlscope.pipeline.per_rank import aggregate_ranks
    from dlscope.whatif.job import from_analysed
    from dlscope.whatif.stored import Replay, request

    an = analyse(pickle.loads(data))
    gc.collect()
    gc.disable()  # as the import: the cyclic GC paused
    spent: dict[str, float] = {}

    def timed(step, fn):
        prof = None
        if profile == step:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t = time.process_time()
        out = fn()
        spent[step] = time.process_time() - t
        if prof is not None:
            prof.disable()
            import pstats
            pstats.Stats(prof).sort_stats(sort).print_stats(60)
        return out

    per_rank = timed("aggregate_ranks", lambda: aggregate_ranks(an, None, None, None, 1))
    aggs, findings = [a for a, _ in per_rank], [f for _, f in per_rank]
    figures = timed("rank_figures", lambda: rank_figures(an, aggs))
    replay = timed("replay_init", lambda: Replay(lambda: from_analysed(an)))
    replayed = timed("replay_figures", lambda: replay.figures([request(a, f) for a, f in zip(aggs, findings)]))
    arrays = timed("timeline_arrays", lambda: timeline_arrays(an))
    gc.enable()
    digests = {"aggs": _digest(_aggs_value(aggs)), "findings": _digest(findings), "figures": _digest(list(figures)),
               "replay": _digest([vars(f) for f in replayed]), "timeline": _digest(arrays)} if digest else {}
    return spent, digests


def run_tree(parsed: str, repeat: int, profile: str | None, sort: str) -> None:
    """In the tree on PYTHONPATH: time each step in the import's order; print one JSON line."""
    data = Path(parsed).read_bytes()
    best = {s: float("inf") for s in STEPS}
    digests: dict[str, str] = {}
    for i in range(repeat):
        spent, made = _one_run(data, profile, sort, digest=i == 0)
        digests = digests or made
        for s in STEPS:
            best[s] = min(best[s], spent[s])
    print(json.dumps({**best, "digests": digests}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?")
    parser.add_argument("--tree", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", choices=STEPS)
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--keep", type=Path, help="keep the parsed pickle here (reused when it exists)")
    parser.add_argument("--run-tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_tree:
        run_tree(args.run_tree, args.repeat, args.profile, args.sort)
        return
    trees = [str(Path(t).resolve()) for t in args.tree]
    with tempfile.TemporaryDirectory() as tmp:
        parsed = str(args.keep or Path(tmp) / "parsed.pickle")
        if not os.path.exists(parsed):  # a trace, or a folder of a job's traces
            parse_to_pickle(args.source, trees[0], parsed)
        best: dict[str, dict[str, float]] = {t: {} for t in trees}
        rounds = 1 if args.profile else args.rounds
        for r in range(rounds):
            for tree in trees:
                cmd = [sys.executable, __file__, "--run-tree", parsed, "--repeat", str(args.repeat),
                       "--sort", args.sort] + (["--profile", args.profile] if args.profile else [])
                out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": tree}).stdout
                if args.profile:
                    print(out)
                row = json.loads(out.strip().splitlines()[-1])
                print(f"round {r + 1} {tree}: " + " ".join(f"{s} {row[s]:.4f}" for s in STEPS)
                      + f" total {sum(row[s] for s in STEPS):.4f} {row['digests']}", flush=True)
                for s in STEPS:
                    best[tree][s] = min(best[tree].get(s, float("inf")), row[s])
        for tree in trees:
            print(f"best {tree}: " + ", ".join(f"{k} {v:.4f}" for k, v in best[tree].items())
                  + f", total {sum(best[tree].values()):.4f}")


if __name__ == "__main__":
    main()
