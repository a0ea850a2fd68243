"""Capture overhead of ``dlscope profile`` (default settings) on the CPU examples.

For each example the script runs the program directly and under ``dlscope profile`` (torch backend,
default window: wait 1, warmup 1, record 5 steps), ``--repeat`` times each, alternating, and reports
medians of:

- the program's own ms/step over all its steps (what a user's job feels),
- the average iteration time of the captured steps, from the profile database (the steps while recording),
- the command's wall time (including dlscope's import and summary).

    python bench/capture_overhead.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "mlp.py": ["--steps", "30"],
    "cnn_dataloader.py": ["--steps", "20"],
    "slow_dataset.py": ["--steps", "12"],
}
MS_PER_STEP = re.compile(r"([\d.]+) ms/step")


def _profile_cmd() -> list[str]:
    from dlscope import cli

    if "profile" in cli.cli.commands:
        return [sys.executable, "-m", "dlscope", "profile"]
    return [sys.executable, "-c", "from dlscope.capture.cli_profile import profile_command as c; c()"]


def run(argv: list[str]) -> tuple[float, float]:
    """(program ms/step, wall seconds) of one run."""
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{res.stderr}")
    return float(MS_PER_STEP.search(res.stdout).group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from dlscope.present.summary import summary_dict

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in EXAMPLES.items():
            program = [sys.executable, str(REPO / "examples" / name), *extra]
            direct, profiled, captured, wall_d, wall_p = [], [], [], [], []
            for i in range(args.repeat):
                ms, wall = run(program)
                direct.append(ms)
                wall_d.append(wall)
                db = Path(tmp) / f"{name}.{i}.sqlite"
                ms, wall = run([*_profile_cmd(), "-o", str(db), "--", *program])
                profiled.append(ms)
                wall_p.append(wall)
                captured.append(summary_dict(db)["aggregation"]["avg_iteration_ns"] / 1e6)
            med = statistics.median
            rows.append((name, med(direct), med(profiled), med(captured), med(wall_d), med(wall_p)))
    print("| example | direct ms/step | profiled ms/step (all steps) | ratio | captured steps ms/step | ratio "
          "| direct wall s | profiled wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, d, p, c, wd, wp in rows:
        print(f"| {name} | {d:.2f} | {p:.2f} | {p / d:.2f}× | {c:.2f} | {c / d:.2f}× | {wd:.1f} | {wp:.1f} |")


if __name__ == "__main__":
    main()
