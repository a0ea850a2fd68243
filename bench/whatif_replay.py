"""Replay every real profile under ../shared/data and print, per file, its iterations, the replay's error per
iteration and how long building the graph and replaying it took (docs/whatif.md's tables).

    python bench/whatif_replay.py [DATA_DIR]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dlscope.pipeline import build_database
from dlscope.store import reader
from dlscope.whatif.graph import build
from dlscope.whatif.job import from_database
from dlscope.whatif.predict import path_of, replay_errors, windows
from dlscope.whatif.replay import Weights, solve

DATA = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared" / "data"
INPUTS = sorted(DATA.glob("kineto/*.gz")) + sorted(DATA.glob("nsys_sqlite/*.sqlite")) + \
    [DATA / "kineto" / "param_dlrm_8rank_v100", DATA / "kineto" / "hta_128rank_sampled"]


def main() -> None:
    print("| file | method | ranks | iterations | vertices | edges | build s | replay s | sweeps | "
          "median error | max error | unexplained wait |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for path in INPUTS:
            db = Path(tmp) / (path.name + ".sqlite")
            build_database([path], db, progress=False)
            conn = reader.connect(db)
            job = from_database(conn)
            aggs = conn.execute("SELECT rank, iter_start, iter_stop, iteration_method FROM aggregations").fetchall()
            conn.close()
            if not len(job.ops) and not len(job.kernels) and not len(job.api_calls):
                continue
            t = time.perf_counter()
            g = build(job)
            t_build = time.perf_counter() - t
            t = time.perf_counter()
            base = solve(g, Weights.measured(g))
            t_solve = time.perf_counter() - t
            wins = [windows(g, r, a, b) for r, a, b, _ in aggs]
            errors = np.concatenate([replay_errors(g, w, base)["error_pct"].to_numpy() for w in wins])
            paths = [path_of(g, w, base) for w in wins]
            unexplained = (sum(int(p["unexplained"].sum()) for p in paths)
                           / max(sum(int(p["ns"].sum()) for p in paths), 1))
            methods = sorted({m for *_, m in aggs})
            n_its = sum(b - a + 1 for _, a, b, m in aggs) if methods != ["whole_profile"] else len(aggs)
            print(f"| {path.name} | {', '.join(methods)} | {len(aggs)} | {n_its} | {g.n:,} | {len(g.src):,} | "
                  f"{t_build:.2f} | {t_solve:.2f} | {base.rounds} | {np.median(np.abs(errors)):.2f}% | "
                  f"{np.abs(errors).max():.2f}% | {100 * unexplained:.1f}% |")


if __name__ == "__main__":
    main()
