"""What-if predictions against real A/B pairs: for every capture A and the scenario that turns it into capture B,
the iteration time `dlscope whatif` predicts from A beside B's measured one (docs/whatif.md, "GPU pairs").

    python bench/whatif_pairs.py DIR            # DIR holds lm_{fp32,amp}_{eager,graphs}_w{0,4}_r{1,2}.sqlite

The databases are what `bench/gpu_session.sh` (ONLY='^(env|pair_.*)$') writes. Each variant runs twice, so the
table also shows how far two runs of the same variant lie apart: a prediction error inside that spread is noise.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from pathlib import Path

from dlscope.whatif import whatif

# (A, B, scenario): the change that turns variant A into variant B, and the scenario that models it.
PAIRS = [
    ("fp32_eager_w0", "amp_eager_w0", "amp"),
    ("fp32_eager_w4", "amp_eager_w4", "amp"),
    ("fp32_graphs_w0", "amp_graphs_w0", "amp"),
    ("fp32_eager_w0", "fp32_graphs_w0", "cuda-graphs"),
    ("amp_eager_w0", "amp_graphs_w0", "cuda-graphs"),
    ("fp32_eager_w0", "fp32_eager_w4", "no-dataloader"),
    ("amp_eager_w0", "amp_eager_w4", "no-dataloader"),
]
NAME = re.compile(r"lm_(?P<variant>\w+_\w+_w\d)_r(?P<run>\d+)\.sqlite$")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    runs: dict[str, dict[int, Path]] = {}
    for db in sorted(args.folder.glob("lm_*.sqlite")):
        if m := NAME.search(db.name):
            runs.setdefault(m["variant"], {})[int(m["run"])] = db
    if not runs:
        print(f"whatif_pairs.py: {args.folder}: no lm_*_r*.sqlite databases", file=sys.stderr)
        return 2
    scenarios = sorted({s for _, _, s in PAIRS})
    results = {(v, r): whatif(db, scenarios, None, 5) for v, by_run in runs.items() for r, db in by_run.items()}
    measured = {key: res["baseline_iteration_ns"] / 1e6 for key, res in results.items()}
    print("| variant | run 1 | run 2 | spread |\n|---|---:|---:|---:|")
    for v, by_run in runs.items():
        times = [measured[(v, r)] for r in sorted(by_run)]
        spread = f"{100 * (max(times) / min(times) - 1):.0f} %" if len(times) > 1 else ""
        print(f"| {v} | " + " | ".join(f"{t:.2f} ms" for t in times) + f" | {spread} |")
    print("\n| A → B (scenario) | A run | A measured | predicted | B run | B measured | error |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for a, b, scenario in PAIRS:
        for ra, rb in itertools.product(sorted(runs.get(a, {})), sorted(runs.get(b, {}))):
            res = results[(a, ra)]
            predicted = next(s for s in res["scenarios"] if s["name"] == scenario)["predicted_iteration_ns"] / 1e6
            truth = measured[(b, rb)]
            print(f"| {a} → {b} (`{scenario}`) | {ra} | {measured[(a, ra)]:.2f} ms | {predicted:.2f} ms | {rb} | "
                  f"{truth:.2f} ms | {100 * (predicted / truth - 1):+.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
