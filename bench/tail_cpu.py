"""CPU seconds of the import's one-core tail steps, trees alternated: the timeline arrays (``matrices_by_rank`` of
the analysed tables, then ``stored_arrays`` of each rank: what ``pipeline.build.timeline_arrays`` does) and
``distributed.store.write_distributed`` of the import's per-rank figures and collectives (into a fresh database
in memory, inside a transaction as the import's ``_write_results``).

    python bench/tail_cpu.py TRACE_OR_FOLDER --tree /work/ref8/src --tree src [--rounds 3] [--repeat 5]

The input is imported once (by the first tree) and what the two steps read is kept in a pickle: the tables the
timeline reads, the ranks, and ``rank_figures``' two frames. Each round runs every tree in its own interpreter
(``PYTHONPATH=TREE``), which times each step ``--repeat`` times with ``time.process_time``; each line is the best
of the repeats, the summary the best over the rounds. The timeline's bytes of both trees are hashed: a tree
storing other arrays is reported.
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

TIMELINE_TABLES = ("ops", "ranges", "api_calls", "kernels", "memops", "memory")


def capture(source: str, out: str) -> None:
    """Import ``source``; keep what the timeline arrays and ``write_distributed`` read in ``out``."""
    import dlscope.pipeline.build as pipeline

    kept: dict = {}
    timeline_arrays, write_distributed = pipeline.timeline_arrays, pipeline.write_distributed

    def arrays(an, ranks=None):
        tables = pipeline._raw_tables(an)
        kept["timeline"] = ({k: tables[k] for k in TIMELINE_TABLES if k in tables}, [int(r) for r in an.ranks])
        return timeline_arrays(an, ranks)

    def distributed(conn, an, aggs, agg_ids, figures=None):
        kept["figures"] = (figures, [int(a.row["rank"]) for a in aggs], list(agg_ids))
        return write_distributed(conn, an, aggs, agg_ids, figures)

    pipeline.timeline_arrays, pipeline.write_distributed = arrays, distributed
    with tempfile.TemporaryDirectory() as tmp:
        pipeline.build_database([Path(source)], Path(tmp) / "x.sqlite", progress=False)
    with open(out, "wb") as f:
        pickle.dump(kept, f, protocol=5)


def measure(saved: str, repeat: int) -> dict:
    """Best ``process_time`` of each step over ``repeat`` runs, and the hash of the timeline's bytes."""
    import sqlite3
    from types import SimpleNamespace

    from dlscope.analyze.timeline import matrices_by_rank, stored_arrays
    from dlscope.distributed.store import write_distributed

    with open(saved, "rb") as f:
        kept = pickle.load(f)
    tables, ranks = kept["timeline"]
    figures, agg_ranks, agg_ids = kept["figures"]
    aggs = [SimpleNamespace(row={"rank": r}) for r in agg_ranks]
    best = {"timeline_arrays": float("inf"), "write_distributed": float("inf")}
    digest = ""
    for _ in range(repeat):
        t = time.process_time()
        out = {r: stored_arrays(*of_rank) for r, of_rank in matrices_by_rank(tables, ranks).items()}
        best["timeline_arrays"] = min(best["timeline_arrays"], time.process_time() - t)
        h = hashlib.sha256()
        for r in sorted(out):
            for name in sorted(out[r]):
                h.update(f"{r}:{name}".encode())
                h.update(out[r][name])
        digest = h.hexdigest()
        del out
        if figures is not None:
            conn = sqlite3.connect(":memory:")
            conn.execute("BEGIN")
            t = time.process_time()
            write_distributed(conn, None, aggs, agg_ids, figures)
            best["write_distributed"] = min(best["write_distributed"], time.process_time() - t)
            conn.close()
    return {**best, "digest": digest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", nargs="?")
    p.add_argument("--tree", action="append", default=[])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--child", nargs=2, metavar=("PICKLE", "REPEAT"))
    p.add_argument("--capture", nargs=2, metavar=("SOURCE", "PICKLE"))
    a = p.parse_args()
    if a.capture:
        capture(*a.capture)
        return
    if a.child:
        print(json.dumps(measure(a.child[0], int(a.child[1]))))
        return
    trees = [str(Path(t).resolve()) for t in a.tree] or [str(Path("src").resolve())]
    fd, saved = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    try:
        subprocess.run([sys.executable, __file__, "--capture", a.source, saved],
                       env={**os.environ, "PYTHONPATH": trees[0]}, check=True)
        best: dict[str, dict[str, float]] = {t: {} for t in trees}
        digests = {}
        for n in range(a.rounds):
            for tree in trees:
                run = subprocess.run([sys.executable, __file__, "--child", saved, str(a.repeat)],
                                     env={**os.environ, "PYTHONPATH": tree}, check=True, capture_output=True,
                                     text=True)
                got = json.loads(run.stdout.strip().splitlines()[-1])
                digests[tree] = got.pop("digest")
                print(f"round {n + 1} {tree}: " + "  ".join(f"{k} {v:.4f}" for k, v in got.items()), flush=True)
                for k, v in got.items():
                    best[tree][k] = min(best[tree].get(k, float("inf")), v)
        for tree in trees:
            print(f"best {tree}: " + "  ".join(f"{k} {v:.4f}" for k, v in best[tree].items()))
        if len(set(digests.values())) > 1:
            print("the trees' timeline arrays DIFFER")
    finally:
        os.unlink(saved)


if __name__ == "__main__":
    main()
