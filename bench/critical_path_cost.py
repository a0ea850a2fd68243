"""What storing the critical path adds to an import (docs/whatif.md, "What the profile database stores"): the
time of ``whatif.stored.annotate`` on the tables an import hands it (minimum and median of 5 runs, and the
graph build's share), and whole imports without and with it, alternating.

    python bench/critical_path_cost.py [TRACE_OR_FOLDER ...]
"""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dlscope.pipeline.build as pipeline
from dlscope.processes import fork_pays
from dlscope.whatif.graph import build
from dlscope.whatif.stored import annotate

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "kineto"
INPUTS = [Path(p) for p in sys.argv[1:]] or [DATA / "hta_v100_rank1of2_5steps.json.gz",
                                               DATA / "param_dlrm_8rank_v100"]


def _import(path: Path, store: bool) -> tuple[float, tuple | None]:
    """One import (critical path stored or not); returns its time and what annotate was handed."""
    handed = []
    pipeline.annotate = annotate if store else (lambda *args: handed.append(args))
    pipeline.fork_pays = fork_pays if store else (lambda: False)  # without: annotate is called here, captured
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        pipeline.build_database([path], Path(tmp) / "x.sqlite", progress=False)
        return time.perf_counter() - t, (handed[0] if handed else None)


def main() -> None:
    print("| input | vertices | graph build s (min) | annotate s (min / median) | import without s | import with s |")
    print("|---|---|---|---|---|---|")
    for path in INPUTS:
        without, with_ = [], []
        handed = None
        for _ in range(3):
            t, handed = _import(path, False)
            without.append(t)
            with_.append(_import(path, True)[0])
        job_of, aggs, findings = handed
        runs, builds = [], []
        for _ in range(5):
            a, f = copy.deepcopy(aggs), copy.deepcopy(findings)
            t = time.perf_counter()
            annotate(job_of, a, f)
            runs.append(time.perf_counter() - t)
            t = time.perf_counter()
            g = build(job_of())
            builds.append(time.perf_counter() - t)
        print(f"| {path.name} | {g.n:,} | {min(builds):.2f} | {min(runs):.2f} / {statistics.median(runs):.2f} | "
              f"{min(without):.2f}–{max(without):.2f} | {min(with_):.2f}–{max(with_):.2f} |")
    pipeline.annotate = annotate


if __name__ == "__main__":
    main()
