"""CPU seconds of the critical path's replay (``whatif.stored.Replay``) by step, trees alternated.

    python bench/replay_cpu.py TRACE_OR_FOLDER --tree /work/ref8/src --tree src [--rounds 3] [--repeat 3]
    python bench/replay_cpu.py TRACE_OR_FOLDER --tree src --profile [--sort tottime]

The input is imported once (by the first tree) and what the import hands the replay is kept in a pickle: the
replay's job (the analysed tables it reads) and each aggregation's request (rank, iterations, findings'
rules). Each round then runs every tree in its own fresh interpreter (``PYTHONPATH=TREE``), which loads the
pickle and times, ``--repeat`` times, each step's ``time.process_time``: the graph build, the unchanged
replay, the walks of the windows (``_Shared`` included) and the figures (the findings priced). Each line is
the best of the repeats; the summary is the best over the rounds. CPU time, not wall: other load on a shared
machine inflates it less.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

STEPS = ("build", "unchanged", "walks", "figures", "total")


def capture(source: Path | str, out: Path | str) -> None:
    """Import ``source``; keep the replay's job and requests (what ``annotate`` is handed) in ``out``."""
    import dlscope.pipeline.build as pipeline
    from dlscope.whatif.stored import request

    handed: list = []
    pipeline.annotate = lambda *a: handed.append(a)
    pipeline.fork_pays = lambda: False  # annotate called here, not in a child beside the aggregation
    with tempfile.TemporaryDirectory() as tmp:
        pipeline.build_database([Path(source)], Path(tmp) / "x.sqlite", progress=False)
    job_of, aggs, findings = handed[0]
    with Path(out).open("wb") as f:
        pickle.dump((job_of(), [request(a, found) for a, found in zip(aggs, findings)]), f, protocol=5)


def measure(saved: Path, repeat: int, profile: bool, sort: str) -> dict[str, float]:
    """Best ``process_time`` of each step over ``repeat`` replays (each on a fresh copy of the job)."""
    import dlscope.whatif.stored as stored

    spent: dict[str, float] = {}

    def timed(name, fn):
        def call(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t
        return call

    stored.build = timed("build", stored.build)
    stored.unchanged = timed("unchanged", stored.unchanged)
    best: dict = {s: float("inf") for s in STEPS}
    for _ in range(repeat):
        with saved.open("rb") as f:
            job, requests = pickle.load(f)
        spent.clear()
        prof = None
        if profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t = time.process_time()
        replay = stored.Replay(lambda job=job: job)
        t1 = time.process_time()
        for rank, start, stop, _ in requests:
            replay.walk(rank, start, stop)
        t2 = time.process_time()
        figures = replay.figures(requests)
        t3 = time.process_time()
        if prof is not None:
            prof.disable()
        assert replay.note is None and all(f.note is None for f in figures), replay.note
        spent.update(walks=t2 - t1, figures=t3 - t2, total=t3 - t)
        for s in STEPS:
            best[s] = min(best[s], spent.get(s, 0.0))
        best["digest"] = _digest(figures)
        if prof is not None:
            import pstats
            pstats.Stats(prof).sort_stats(sort).print_stats(45)
        del replay, figures, job
    return best


def _digest(figures: list) -> str:
    """A hash of every figure the replay hands the database (the trees must agree on it)."""
    import hashlib
    h = hashlib.sha256()
    for f in figures:
        for a in (f.nodes, f.node_ns, f.kernel_ns, f.cells, f.cell_ns):
            h.update(np.asarray(a, np.int64).tobytes())
        h.update(repr((list(map(str, f.kernel_names)), f.savings, f.combined)).encode())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", type=Path)
    ap.add_argument("--tree", action="append", required=True, help="a source tree (its src folder)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile each repeat of the first tree (one round)")
    ap.add_argument("--sort", default="cumulative")
    ap.add_argument("--keep", type=Path, help="keep the captured pickle here (reused when it exists)")
    ap.add_argument("--saved", type=Path, help="(internal) the pickle to measure")
    args = ap.parse_args()
    if args.saved is not None:
        best = measure(args.saved, args.repeat, args.profile, args.sort)
        print(" ".join(f"{s}={best[s]:.4f}" for s in STEPS) + f" digest={best['digest']}")
        return
    trees = [str(Path(t).resolve()) for t in args.tree]
    with tempfile.TemporaryDirectory() as tmp:
        saved = args.keep or Path(tmp) / "replay.pickle"
        run = [sys.executable, "-c", "import sys; sys.argv[0] = 'replay_cpu'; from replay_cpu import capture;"
               f"capture({str(args.input.resolve())!r}, {str(saved)!r})"]
        if not saved.exists():
            subprocess.run(run, check=True, cwd=Path(__file__).parent, env={**os.environ, "PYTHONPATH": trees[0]})
        rounds = 1 if args.profile else args.rounds
        results: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
        for r in range(rounds):
            for tree in trees[:1] if args.profile else trees:
                cmd = [sys.executable, str(Path(__file__).resolve()), str(args.input), "--tree", tree,
                       "--saved", str(saved), "--repeat", str(args.repeat), "--sort", args.sort]
                cmd += ["--profile"] if args.profile else []
                out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": tree}).stdout
                if args.profile:
                    print(out)
                    continue
                line = out.strip().splitlines()[-1]
                results[tree].append({k: float(v) for k, v in (p.split("=") for p in line.split()) if k != "digest"})
                print(f"round {r + 1} {tree}: {line}", flush=True)
        if args.profile:
            return
        print(f"best of {rounds} rounds x {args.repeat} repeats (CPU s):")
        for tree in trees:
            print(f"  {tree}: " + " ".join(f"{s} {min(x[s] for x in results[tree]):.3f}" for s in STEPS))


if __name__ == "__main__":
    main()
