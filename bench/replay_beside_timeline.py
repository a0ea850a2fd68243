"""Timeline of an import whose critical path is replayed beside the aggregation (branch h22cp): each stage's
start and end (seconds from process start) and the CPU seconds of the process it ran in, the forked replay's
stages included (``Replay.__init__``: graph and unchanged replay; ``walk_ahead``: each rank's path;
``plan_ahead``: the rules' scenarios derived while the findings are not there; ``figures``: the findings priced)
and how long the importing process waited for them (``annotate_here``).

    PYTHONPATH=src python bench/replay_beside_timeline.py import TRACE -o X.sqlite --force -q
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time

T0 = time.perf_counter()

import dlscope.cli  # noqa: E402 - timed from before the imports
import dlscope.whatif.stored as stored  # noqa: E402
from dlscope.pipeline import build  # noqa: E402
from dlscope.store import writer  # noqa: E402

LOG = os.path.join(tempfile.gettempdir(), f"replay_beside_timeline.{os.getpid()}.log")


def record(name: str, start: float) -> None:
    with open(LOG, "a") as f:  # the forked child appends its own lines
        f.write(f"{os.getpid()} {name} {start - T0:.3f} {time.perf_counter() - T0:.3f} "
                f"cpu={time.process_time():.3f}\n")


def timed(name: str, fn):
    def run(*a, **k):
        start = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            record(name, start)
    return run


def main() -> None:
    for name in ("load_profiles_parallel", "analyse", "aggregate_ranks", "annotate", "rank_figures", "_write_results"):
        setattr(build, name, timed(name, getattr(build, name)))
    for name in ("__init__", "walk_ahead", "plan_ahead", "figures"):
        setattr(stored.Replay, name, timed("Replay." + name, getattr(stored.Replay, name)))
    stored.apply = timed("apply", stored.apply)
    beside, atomic = stored.annotated_beside, writer.atomic_database

    @contextlib.contextmanager
    def timed_beside(*a, **k):
        with beside(*a, **k) as annotate_here:
            wrapped = timed("annotate_here (wait + apply)", annotate_here)
            if hasattr(annotate_here, "send"):  # the findings sent early (trees since h23job)
                wrapped.send = timed("annotate_here.send", annotate_here.send)
            yield wrapped

    @contextlib.contextmanager
    def timed_atomic(*a, **k):
        start = time.perf_counter()
        with atomic(*a, **k) as db:
            yield db
            record("database body", start)
        record("atomic_database (writer joined)", start)

    build.annotated_beside = timed_beside
    build.writer.atomic_database = timed_atomic
    try:
        dlscope.cli.main(sys.argv[1:])
    finally:
        record("end", T0)
        with open(LOG) as f:
            print(f.read())
        os.unlink(LOG)


if __name__ == "__main__":
    main()
