"""Every rank's findings (and aggregation row) of a set of inputs, as one JSON file, for the tree on PYTHONPATH:
run it with the tree before a change and after it, and compare the two files (``cmp`` or ``diff``). Each
input is parsed, analysed and its ranks aggregated and judged in this process (one worker), as an import does
before the critical path; an input that cannot be imported is recorded with its error message.

    PYTHONPATH=TREE/src python bench/findings_dump.py OUT.json INPUT... [--all-shared ../shared/data]

``--all-shared DIR``: every trace under DIR, a folder of several Kineto ranks (``*/``) as one job.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlscope.analyze.analysis import analyse
from dlscope.errors import DlscopeError
from dlscope.pipeline.executors import load_profiles_parallel
from dlscope.pipeline.inputs import expand_inputs
from dlscope.pipeline.per_rank import aggregate_ranks


def shared_inputs(root: Path) -> list[Path]:
    """The traces under ``root``: each file, and each sub-folder of ranks as one input (SOURCES.md left out)."""
    out: list[Path] = []
    for kind in sorted(p for p in root.iterdir() if p.is_dir()):
        for entry in sorted(kind.iterdir()):
            if entry.is_dir() or entry.suffix not in (".md",):
                out.append(entry)
    return out


def judged(path: Path) -> dict:
    try:
        profile = load_profiles_parallel(expand_inputs([path]), workers=1)
        an = analyse(profile)
        per_rank = aggregate_ranks(an, None, None, workers=1)
    except DlscopeError as e:
        return {"error": str(e)}
    return {str(agg.row["rank"]): {"row": {k: v for k, v in agg.row.items() if k != "created_at"},
                                   "findings": found} for agg, found in per_rank}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("inputs", nargs="*")
    parser.add_argument("--all-shared", type=Path)
    args = parser.parse_args()
    inputs = [Path(p) for p in args.inputs] + (shared_inputs(args.all_shared) if args.all_shared else [])
    result = {}
    for path in inputs:
        result[path.name] = judged(path)
        print(path.name, len(result[path.name]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
