"""Re-aggregation in the background: the Iterations view's "Reaggregate" runs ``dlscope.pipeline.aggregate``.

The work runs in a separate process (it is CPU-bound and must not stall the viewer), and is the only place
that opens the database for writing; viewing connections stay read-only and are reopened when it finishes
(the pipeline may replace the file by renaming a new one into place). The worker is a spawned process from
``dlscope.processes`` (the viewer has threads, so no fork): it dies with the server, SIGKILL included, and a
clean shutdown kills it.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

from dlscope.processes import stop_pool, worker_pool
from dlscope.viewer.profile_db import ProfileDB


def run_pipeline_aggregate(db_path: str, iter_start: int | None, iter_stop: int | None, key_node: str | None):
    """Child-process entry point: import lazily so the viewer starts even while the pipeline is absent."""
    from dlscope.pipeline import aggregate
    return aggregate(db_path, iter_start, iter_stop, key_node)


class Reaggregator:
    """At most one re-aggregation per database at a time; job states are kept for the browser to poll."""

    def __init__(self, aggregate: Callable | None = None):
        self._aggregate: Callable[..., Any] = aggregate or run_pipeline_aggregate
        self._executor: Executor | None = None
        self._custom = aggregate is not None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._closed = False
        self.jobs: dict[int, dict] = {}

    def _pool(self) -> Executor:
        if self._executor is None:
            # a spawned worker (the viewer has threads) that dies with the viewer (dlscope.processes)
            self._executor = ThreadPoolExecutor(1) if self._custom else worker_pool(1, "spawn")
        return self._executor

    def running(self, db: ProfileDB) -> dict | None:
        return next((j for j in self.jobs.values() if j["db"] == db.key and j["state"] == "underway"), None)

    def start(self, db: ProfileDB, iter_start: int | None, iter_stop: int | None, key_node: str | None) -> dict:
        with self._lock:
            busy = self.running(db)
            if busy:
                return busy
            job: dict[str, Any] = {"id": next(self._ids), "db": db.key, "state": "underway", "started": time.time(),
                   "iter_start": iter_start, "iter_stop": iter_stop, "key_node": key_node, "message": None}
            self.jobs[job["id"]] = job
        future = self._pool().submit(self._aggregate, str(db.path), iter_start, iter_stop, key_node)
        future.add_done_callback(lambda f: self._finish(db, job, f))
        return job

    def _finish(self, db: ProfileDB, job: dict, future) -> None:
        try:
            result = future.result()
            db.load()
            job.update(state="success", result=result if isinstance(result, (int, str)) else None,
                       message="Re-aggregation finished: reload to see the new aggregation.")
        except ModuleNotFoundError as exc:
            job.update(state="failed", message=f"re-aggregation is not available in this build ({exc})")
        except Exception as exc:  # noqa: BLE001 - the browser shows the one-line reason; the log keeps the rest
            if self._closed:
                job.update(state="failed", message="the viewer stopped before the re-aggregation finished")
            else:
                traceback.print_exc()
                job.update(state="failed", message=f"{type(exc).__name__}: {exc}")
        job["finished"] = time.time()

    def shutdown(self) -> None:
        """Stop the worker now (a running re-aggregation is killed, its database left as it was)."""
        self._closed = True
        if isinstance(self._executor, ProcessPoolExecutor):
            stop_pool(self._executor)
        elif self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
