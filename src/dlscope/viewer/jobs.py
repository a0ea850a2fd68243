"""Re-aggregation in the background: the Iterations view's "Reaggregate" runs ``dlscope.pipeline.aggregate``.

The work runs in a separate process (it is CPU-bound and must not stall the viewer), and is the only place
that opens the database for writing; viewing connections stay read-only and are reopened when it finishes
(the pipeline may replace the file by renaming a new one into place).

The worker dies with the server. It is a spawned process that watches a pipe whose only writing end the
server holds: when the server exits for any reason (SIGTERM, SIGKILL, a crash) the pipe reaches end-of-file and
the worker exits at once; a clean shutdown also terminates it. Once no process holds multiprocessing's
resource-tracker pipe any more, the tracker that spawning starts exits too, so nothing stays behind.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from dlscope.viewer.profile_db import ProfileDB


def run_pipeline_aggregate(db_path: str, iter_start: int | None, iter_stop: int | None, key_node: str | None):
    """Child-process entry point: import lazily so the viewer starts even while the pipeline is absent."""
    from dlscope.pipeline import aggregate
    return aggregate(db_path, iter_start, iter_stop, key_node)


def _exit_when_parent_goes(watch: Connection) -> None:
    """Block until the server's end of ``watch`` closes (the server exited), then leave at once."""
    try:
        watch.recv()
    except (EOFError, OSError):
        pass
    os._exit(1)


def _worker(watch: Connection, results: Connection, fn: Callable, args: tuple) -> None:
    """The spawned process: run ``fn(*args)`` and send ("ok", result) or ("error", type, message, traceback)."""
    threading.Thread(target=_exit_when_parent_goes, args=(watch,), daemon=True, name="dlscope-parent-watch").start()
    try:
        result = fn(*args)
        results.send(("ok", result if isinstance(result, (int, str, list, tuple, dict, type(None))) else None))
    except BaseException as exc:  # noqa: BLE001 - any failure (SystemExit too) goes back as the job's reason
        results.send(("error", type(exc).__name__, str(exc), traceback.format_exc()))
    finally:
        results.close()


class Reaggregator:
    """At most one re-aggregation per database at a time; job states are kept for the browser to poll.

    ``aggregate`` (tests) replaces the pipeline and runs in a thread of this process."""

    def __init__(self, aggregate: Callable | None = None):
        self._aggregate: Callable[..., Any] = aggregate or run_pipeline_aggregate
        self._custom = aggregate is not None
        self._threads = ThreadPoolExecutor(1, thread_name_prefix="dlscope-reaggregate") if self._custom else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._processes: dict[int, Any] = {}
        self._closed = False
        self.jobs: dict[int, dict] = {}

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
        args = (str(db.path), iter_start, iter_stop, key_node)
        if self._threads is not None:
            future = self._threads.submit(self._aggregate, *args)
            future.add_done_callback(lambda f: self._finish(db, job, lambda: f.result()))
            return job
        ctx = multiprocessing.get_context("spawn")
        watch_child, watch_parent = ctx.Pipe(duplex=False)      # the server keeps the writing end, never writes
        results_parent, results_child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(watch_child, results_child, self._aggregate, args),
                           name=f"dlscope-reaggregate-{job['id']}", daemon=True)
        proc.start()
        watch_child.close()
        results_child.close()
        with self._lock:
            self._processes[job["id"]] = (proc, watch_parent)
        threading.Thread(target=self._wait, args=(db, job, proc, results_parent), daemon=True,
                         name=f"dlscope-reaggregate-wait-{job['id']}").start()
        return job

    def _wait(self, db: ProfileDB, job: dict, proc, results: Connection) -> None:
        def outcome():
            try:
                message = results.recv()
            except EOFError:
                proc.join()
                raise RuntimeError(f"the re-aggregation process ended without a result (exit code {proc.exitcode})")
            finally:
                results.close()
            proc.join()
            if message[0] == "ok":
                return message[1]
            print(message[3], flush=True)
            if message[1] == "ModuleNotFoundError":
                raise ModuleNotFoundError(message[2])
            raise RuntimeError(f"{message[1]}: {message[2]}")

        try:
            self._finish(db, job, outcome)
        finally:
            with self._lock:
                entry = self._processes.pop(job["id"], None)
            if entry is not None:
                entry[1].close()

    def _finish(self, db: ProfileDB, job: dict, outcome: Callable[[], Any]) -> None:
        try:
            result = outcome()
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
                job.update(state="failed", message=str(exc) if isinstance(exc, RuntimeError)
                           else f"{type(exc).__name__}: {exc}")
        job["finished"] = time.time()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every worker (terminate, then kill) and wait for them; called when the server stops."""
        self._closed = True
        with self._lock:
            entries = list(self._processes.values())
        for proc, _ in entries:
            if proc.is_alive():
                proc.terminate()
        for proc, watch in entries:
            proc.join(timeout)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout)
            watch.close()
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
