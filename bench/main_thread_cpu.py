"""CPU seconds of two of the import's main-thread steps, trees alternated: ``analyse`` (on a fresh copy of the parse
each time) and ``rank_figures`` (the per-rank figures and collectives, of the analysis and aggregations that tree
made). Both trees must agree: a hash of every analysed table (frames, dtypes, categories) and of both figures'
frames is printed per tree.

    python bench/main_thread_cpu.py TRACE_OR_FOLDER --tree /work/ref10/src --tree src [--rounds 3] [--repeat 5]

The input is parsed once (serially, by the first tree) into a pickle. Each round runs every tree in its own
interpreter (``PYTHONPATH=TREE``), which times each step ``--repeat`` times with ``time.process_time`` (the
first analysis, which faults its pages in, is left out: every later one reuses them); each line is the best of
the repeats, the summary the best over the rounds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _digest(frames: dict) -> str:
    h = hashlib.sha1()
    for name in sorted(frames):
        frame = frames[name]
        h.update(name.encode())
        h.update(repr(frame.dtypes.to_dict()).encode())
        for column in frame.columns:
            values = frame[column]
            if hasattr(values, "cat"):
                h.update(repr(list(values.cat.categories)).encode())
            h.update(pickle.dumps(values.tolist()))
    return h.hexdigest()[:16]


def run_tree(parsed: str, repeat: int) -> None:
    """In the tree on PYTHONPATH: time ``analyse`` and ``rank_figures``; print one JSON line."""
    from dlscope.analyze.analysis import analyse
    from dlscope.distributed.figures import rank_figures
    from dlscope.pipeline.per_rank import aggregate_ranks

    data = Path(parsed).read_bytes()
    analyse(pickle.loads(data))  # pages faulted in once, for every timed run alike
    times = []
    for _ in range(repeat):
        profile = pickle.loads(data)
        start = time.process_time()
        an = analyse(profile)
        times.append(time.process_time() - start)
    tables = {name: an.profile.table(name) for name in an.RAW}
    tables["iterations"] = an.iterations
    aggs = [agg for agg, _ in aggregate_ranks(an, None, None)]
    figure_times = []
    for _ in range(repeat):
        start = time.process_time()
        ranks, collectives = rank_figures(an, aggs)
        figure_times.append(time.process_time() - start)
    print(json.dumps({"analyse": min(times), "rank_figures": min(figure_times), "tables": _digest(tables),
                      "figures": _digest({"ranks": ranks, "collectives": collectives})}))


def parse_to_pickle(source: str | Path, tree: str, out: str) -> None:
    """The parsed profile of a trace (or a folder of a job's traces), by ``tree``'s parser in a child, pickled to
    ``out``: every tree then analyses the same input."""
    source = Path(source).resolve()
    paths = sorted(str(p) for p in source.iterdir() if p.is_file()) if source.is_dir() else [str(source)]
    code = ("import pickle, sys; from dlscope.pipeline.executors import load_profiles_parallel; "
            "open(sys.argv[2], 'wb').write(pickle.dumps(load_profiles_parallel(sys.argv[1].split('\\n'), 1)))")
    subprocess.run([sys.executable, "-c", code, "\n".join(paths), out], check=True,
                   env={**os.environ, "PYTHONPATH": tree})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?")
    parser.add_argument("--tree", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--run-tree", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_tree:
        run_tree(args.run_tree, args.repeat)
        return
    trees = [str(Path(t).resolve()) for t in args.tree]
    with tempfile.TemporaryDirectory() as tmp:
        parsed = os.path.join(tmp, "parsed.pickle")
        parse_to_pickle(args.source, trees[0], parsed)
        best: dict[str, dict[str, float]] = {t: {} for t in trees}
        for r in range(args.rounds):
            for tree in trees:
                out = subprocess.run([sys.executable, __file__, "--run-tree", parsed, "--repeat", str(args.repeat)],
                                     check=True, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": tree}).stdout
                row = json.loads(out.strip().splitlines()[-1])
                print(f"round {r + 1} {tree}: analyse {row['analyse']:.4f} s, rank_figures {row['rank_figures']:.4f}"
                      f" s (tables {row['tables']}, figures {row['figures']})", flush=True)
                for step in ("analyse", "rank_figures"):
                    best[tree][step] = min(best[tree].get(step, float("inf")), row[step])
        for tree in trees:
            print(f"best {tree}: " + ", ".join(f"{k} {v:.4f} s" for k, v in best[tree].items()))


if __name__ == "__main__":
    main()
