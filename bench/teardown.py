"""Wall seconds an import spends after its work is done: from the ``wrote DB`` line on stderr (the database
closed and renamed, the summary printed) to the end of the process, for the tree on PYTHONPATH.

    PYTHONPATH=TREE/src python bench/teardown.py [--repeat 5] -- import TRACE -o OUT.sqlite -q --force

Prints each run's total wall and its tail, then the medians. Run it with one tree, then the other.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def one_run(args: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "dlscope", *args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    wrote = None
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith(b"wrote "):
            wrote = time.perf_counter()
    process.wait()
    end = time.perf_counter()
    if process.returncode or wrote is None:
        raise SystemExit(f"the import failed (exit {process.returncode})")
    return end - start, end - wrote


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the dlscope command line after --")
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    runs = [one_run(args) for _ in range(options.repeat)]
    for total, tail in runs:
        print(f"total {total:.3f} s, after 'wrote' {tail:.3f} s")
    print(f"median: total {statistics.median(r[0] for r in runs):.3f} s, "
          f"after 'wrote' {statistics.median(r[1] for r in runs):.3f} s")


if __name__ == "__main__":
    main()
