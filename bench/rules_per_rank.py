"""CPU seconds (``time.process_time``) of the expert rules per rank of a job, rule by rule, for the tree on
PYTHONPATH: a serial import records every rank's ``evaluate`` arguments, then ``evaluate`` runs again on all
ranks ``--repeat`` times (the job's frames already made, as in the pipeline) and the best run is printed.
Each run's findings must equal the import's.

    PYTHONPATH=TREE/src python bench/rules_per_rank.py FOLDER [--repeat 3]     # e.g. bench/out/job64
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from dlscope import experts
from dlscope.experts import registry
from dlscope.pipeline import build, per_rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    calls: list[tuple[tuple, str]] = []
    evaluate = per_rank.evaluate

    def recorded(*call):
        findings = evaluate(*call)
        calls.append((call, json.dumps(findings, default=str)))
        return findings

    per_rank.evaluate = recorded
    with tempfile.TemporaryDirectory() as tmp:
        build.build_database([args.folder], Path(tmp) / "job.sqlite", progress=False, workers=1, critical_path=False)
    rules = dict(registry.load_rules())
    spent: Counter = Counter()

    def timed(rule_id, check):
        def run(ctx, cfg):
            start = time.process_time()
            try:
                return check(ctx, cfg)
            finally:
                spent[rule_id] += time.process_time() - start
        return run

    best, per_rule = float("inf"), {}
    try:
        for _ in range(args.repeat):
            spent.clear()
            registry.RULES.update({rule_id: timed(rule_id, check) for rule_id, check in rules.items()})
            start = time.process_time()
            for call, findings in calls:
                assert json.dumps(experts.evaluate(*call), default=str) == findings, "findings changed"
            total = time.process_time() - start
            if total < best:
                best, per_rule = total, dict(spent)
    finally:
        registry.RULES.update(rules)
    n = len(calls)
    print(f"evaluate, {n} ranks: {best:.3f} s CPU, {1000 * best / n:.1f} ms per rank (best of {args.repeat})")
    for rule_id, seconds in sorted(per_rule.items(), key=lambda kv: -kv[1]):
        print(f"  {rule_id:28s} {1000 * seconds / n:6.2f} ms per rank")


if __name__ == "__main__":
    main()
