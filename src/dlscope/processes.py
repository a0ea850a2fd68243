"""Child processes: the one place dlscope forks, spawns and pools workers, and names the files a run owns.

Three promises hold for every child made here (the forked piece decoder, the forked database writer, the
per-rank workers, the import worker pools, the viewer's re-aggregation worker):

* **It dies with its parent.** A child forked from the main thread asks the kernel for SIGKILL when its
  parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``); every child also watches its parent id from a daemon
  thread, which covers pools started from other threads (the death signal follows the *thread* that forked)
  and systems without prctl. A ``kill -9`` of dlscope leaves no orphan behind.
* **It never outlives a failure.** A parent that gives up (an error, Ctrl-C, SIGTERM) kills its forked
  children instead of waiting for them.
* **Its files can be told from a live run's.** Temporary files carry the run's tag (pid and the process's
  start time, so a reused pid does not pass for the dead run): :func:`remove_dead` deletes those of runs
  that are gone, and every import calls it where it writes.

Inside somebody else's process (``dlscope.profile()`` and ``dlscope.trace_handler()`` run in a user's
multi-threaded training process) dlscope must never fork it: :func:`embedded` turns every fork here into
work in this process (a thread for the writer, serially for the rest).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import multiprocessing as mp
import os
import pickle
import re
import secrets
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1
#: how often a child looks whether its parent is still there (the watcher's latency)
WATCH_INTERVAL_S = 0.2

_embedded_depth = 0
_is_child = False


# ----------------------------------------------------------------------------------- may we fork?


@contextmanager
def embedded() -> Iterator[None]:
    """Run the enclosed dlscope work as a guest in this process: no fork, no process pool, no signal
    handler that ends the process. For the capture API, which runs in the user's training process."""
    global _embedded_depth
    _embedded_depth += 1
    try:
        yield
    finally:
        _embedded_depth -= 1


def is_embedded() -> bool:
    return _embedded_depth > 0


def can_fork() -> bool:
    """Whether dlscope may fork this process (never inside a user's process; only where fork exists)."""
    return not is_embedded() and hasattr(os, "fork") and "fork" in mp.get_all_start_methods()


def fork_pays(cores_needed: int = 2) -> bool:
    """Whether a second process can run beside this one (a fork may happen and the cores are there)."""
    return can_fork() and (os.cpu_count() or 1) >= cores_needed


# ----------------------------------------------------------------------------------- parent death


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """The C library: glibc's soname first (``find_library`` runs ``ldconfig`` in a subprocess, ~6 ms on the way
    to an import's first fork), else whatever ``find_library`` names."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        pass
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


def is_child() -> bool:
    """Whether this process is a helper dlscope started (its parent reports what goes wrong)."""
    return _is_child


def die_with_parent(parent_pid: int, forked_from_main_thread: bool = False) -> None:
    """In a new child: end it when ``parent_pid`` ends. Also the signals a child should not act on."""
    global _is_child
    _is_child = True
    libc = _libc()
    if forked_from_main_thread and sys.platform.startswith("linux") and libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the request was made
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="dlscope-parent-watch", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends its children
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _watch_parent(parent_pid: int) -> None:
    import time

    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(1)  # reparented: the parent is gone


def _pool_child(parent_pid: int) -> None:
    die_with_parent(parent_pid)


# ----------------------------------------------------------------------------------- forked calls


def release_free_memory() -> None:
    """Hand the allocators' free pages back to the system before a fork.

    A forked child shares the parent's pages copy-on-write, free ones included: when the parent then
    reuses a free page, it gets a private copy and the child keeps the old one, so every free page at the
    fork could end up counted twice. glibc's ``malloc_trim`` releases them (hundreds of MB after a large
    analysis); elsewhere this does nothing.
    """
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)


class ChildFailed(Exception):
    """A forked call ended without a result (killed, or its result could not be sent back)."""

    def __init__(self, problem: str, exit_code: int | None = None):
        super().__init__(problem)
        self.exit_code = exit_code


class ForkedCall:
    """``fn(*args)`` in a forked child, beside the caller's own work; :meth:`result` waits for it.

    The child sees the caller's memory copy-on-write (nothing is pickled on the way in), runs only ``fn``
    and leaves with ``os._exit``; its return value or exception comes back pickled through a pipe (an
    exception that cannot be pickled comes back as one line). It dies with its parent.

    ``inbox``: the child can also be sent one value after it started (work it begins before the caller has
    all of its input): ``fn(inbox, *args)`` is called; ``inbox()`` waits for what :meth:`send` sends,
    ``inbox.ready()`` says whether it has come (:class:`Inbox`). Or a value in parts, as the caller makes
    them (:meth:`send_part`, then the last part by :meth:`send`; the child takes them from ``inbox.parts()``), so
    that the child starts on the first parts while the caller still makes the rest.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any, inbox: bool = False):
        release_free_memory()
        read, write = os.pipe()
        in_read, in_write = os.pipe() if inbox else (-1, -1)
        parent = os.getpid()
        main = threading.current_thread() is threading.main_thread()
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                os.close(read)
                if inbox:
                    os.close(in_write)
                die_with_parent(parent, main)
                payload = _pickled(True, fn(Inbox(in_read), *args) if inbox else fn(*args))
            except BaseException as e:  # noqa: BLE001 - sent to the parent
                payload = _pickled(False, e)
            try:
                _write_all(write, payload)
            except BaseException:  # noqa: BLE001 - the parent is gone or gave up
                code = 1
            os._exit(code)
        os.close(write)
        if inbox:
            os.close(in_read)
        self.inbox = in_write  # -1: none, or sent
        self.pid: int | None = pid
        self.pipe = os.fdopen(read, "rb")
        # the result is read as the child writes it, beside the caller's own work (a large result would
        # otherwise wait in the full pipe until result() is called, and travel only then)
        self._came: tuple[bytes, list[memoryview]] | None = None
        self._reader = threading.Thread(target=self._read_result, name="dlscope-forked-result", daemon=True)
        self._reader.start()

    def _read_result(self) -> None:
        try:
            self._came = _read_pickled(self.pipe)
        except (OSError, ValueError):  # the pipe was closed by kill()
            pass

    def send(self, value: Any) -> None:
        """Send the child ``value`` (once; or the last part of it, see ``inbox``). A child that is gone is not an
        error here: its :meth:`result` says what became of it."""
        self._send(value, True)

    def send_part(self, value: Any) -> None:
        """Send the child a part of its value, before the last (:meth:`send`)."""
        self._send(value, False)

    def _send(self, value: Any, last: bool) -> None:
        if self.inbox < 0:
            raise RuntimeError("this child has no inbox, or was sent its value already")
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        # its length and whether more follows first: a process forked later may hold a copy of this end, so
        # no end of file
        data = memoryview(len(payload).to_bytes(8, "little") + (b"\x00" if last else b"\x01") + payload)
        try:
            while data:
                data = data[os.write(self.inbox, data):]
        except BrokenPipeError:
            last = True  # the child is gone: nothing more to send
        if last:
            self._close_inbox()

    def _close_inbox(self) -> None:
        if self.inbox >= 0:
            os.close(self.inbox)
            self.inbox = -1

    def result(self) -> Any:
        """The child's return value; its exception re-raised here."""
        self._close_inbox()  # a child still waiting for a value reads that none comes
        try:
            self._reader.join()
            came, self._came = self._came, None
        finally:
            self.pipe.close()
            status = self._reap()
        if came is None:
            raise ChildFailed(_status_text(status), os.waitstatus_to_exitcode(status))
        ok, value = pickle.loads(came[0], buffers=came[1])
        if not ok:
            raise value
        return value

    def kill(self) -> None:
        """End the child now (the caller gave up on it) and reap it."""
        self._close_inbox()
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()
        self._reader.join()  # the pipe ends with the child
        self.pipe.close()
        self._came = None

    def _reap(self) -> int:
        if self.pid is None:
            return 0
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        return status


class Inbox:
    """In a child with an inbox: the one value its parent sends, or its parts (see :class:`ForkedCall`)."""

    def __init__(self, fd: int):
        self.fd = fd

    def ready(self) -> bool:
        """Whether the value (or its next part, or the end of the pipe: the parent sent none) is there to read,
        without waiting."""
        import select

        return bool(select.select([self.fd], [], [], 0)[0])

    def __call__(self) -> Any:
        """The value, waited for (EOFError: the parent sent none, or only parts of it)."""
        parts = list(self.parts())
        if len(parts) != 1:
            raise EOFError("the parent sent its value in parts")
        return parts[0]

    def parts(self) -> Iterator[Any]:
        """The parts of the value, each as soon as it has come, up to the last (EOFError: the parent stopped
        before it)."""
        came = False
        try:
            while True:
                head = self._read(9, "the parent stopped sending" if came else "the parent sent nothing")
                came = True
                yield pickle.loads(self._read(int.from_bytes(head[:8], "little"), "the parent stopped sending"))
                if head[8] == 0:
                    return
        finally:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def _read(self, size: int, none_then: str) -> bytes:
        chunks, left = [], size
        while left:
            chunk = os.read(self.fd, min(left, 2**20))
            if not chunk:
                raise EOFError(none_then if left == size else "the parent stopped sending")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


#: a pickled result's buffers start at multiples of this in the parent's copy (numpy's and Arrow's alignment)
BUFFER_ALIGN = 64

Pickled = tuple[bytes, list[pickle.PickleBuffer]]


def _pickled(ok: bool, value: Any) -> Pickled:
    """The call's outcome for the parent, its large buffers (numpy and Arrow arrays) out of band (protocol 5): they
    are written to the pipe from where they lie and read into their place in the parent, never copied into a
    pickle and out of it again (235 MB trace: the head start's 29 MB of tables came back in 0.081 s, not 0.164 s,
    bench/README.md, h30parse). An exception the parent could not rebuild (pickled, but its class wants keyword-only
    arguments, as ADBC's errors: "database or disk is full" read as a TypeError) comes back as text."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        payload = pickle.dumps((ok, value), protocol=5, buffer_callback=buffers.append)
        for buffer in buffers:
            buffer.raw()  # contiguous (else pickle keeps it in band), or fail here rather than in the parent
        if not ok:
            pickle.loads(payload, buffers=buffers)
        return payload, buffers
    except Exception as e:  # noqa: BLE001 - an unpicklable result or exception still comes back as text
        what = value if not ok else e
        return pickle.dumps((False, ChildFailed(" ".join(f"{type(what).__name__}: {what}".split())))), []


def _write_all(fd: int, pickled: Pickled) -> None:
    """The pickle's frame: its length, its buffers' count and sizes, the pickle, then each buffer's bytes as
    they lie in the child's memory."""
    payload, buffers = pickled
    raws = [buffer.raw() for buffer in buffers]
    head = b"".join(n.to_bytes(8, "little") for n in (len(payload), len(raws), *(r.nbytes for r in raws)))
    for data in (memoryview(head), memoryview(payload), *raws):
        while data:
            data = data[os.write(fd, data):]


def _read_pickled(pipe: Any) -> tuple[bytes, list[memoryview]] | None:
    """What :func:`_write_all` wrote: the pickle, and its buffers, each read straight into its place in one
    anonymous map (the unpickled arrays keep it alive); None where the pipe ends first (the child died)."""
    import mmap

    head = _read_exactly(pipe, 16)
    if head is None:
        return None
    size, count = int.from_bytes(head[:8], "little"), int.from_bytes(head[8:], "little")
    sizes = _read_exactly(pipe, 8 * count)
    payload = _read_exactly(pipe, size)
    if sizes is None or payload is None:
        return None
    lengths = [int.from_bytes(sizes[8 * i:8 * i + 8], "little") for i in range(count)]
    starts, total = [], 0
    for n in lengths:
        starts.append(total)
        total += -(-n // BUFFER_ALIGN) * BUFFER_ALIGN
    if not total:
        return payload, [memoryview(b"")] * count
    view = memoryview(mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE))  # private: a later fork copies it on write
    buffers = [view[s:s + n] for s, n in zip(starts, lengths)]
    for buffer in buffers:
        if not _read_into(pipe, buffer):
            return None
    return payload, buffers


def _read_exactly(pipe: Any, size: int) -> bytes | None:
    data = bytearray(size)
    return bytes(data) if _read_into(pipe, memoryview(data)) else None


def _read_into(pipe: Any, view: memoryview) -> bool:
    while view:
        n = pipe.readinto(view)
        if not n:
            return False
        view = view[n:]
    return True


def _status_text(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code} without a result"


class ThreadCall(threading.Thread):
    """:class:`ForkedCall`'s interface on a thread, where this process must not fork.

    Work that takes the GIL back briefly many times (the database ingest, once per Arrow batch) would wait
    for the busy main thread at each switch (Python's default interval is 5 ms), which doubled the ingest;
    the interval is 0.5 ms while the thread runs.
    """

    SWITCH_INTERVAL_S = 0.0005

    def __init__(self, fn: Callable[..., Any], *args: Any):
        super().__init__(name="dlscope-background", daemon=True)
        self.work: list[tuple[Callable[..., Any], tuple]] = [(fn, args)]
        self.lock = threading.Lock()
        self.ended = False  # no more work taken (:meth:`then`)
        self.given_up = threading.Event()  # set by kill(): the work ends at its next check (stop_if_given_up)
        self.value: Any = None
        self.error: BaseException | None = None
        self.saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self.saved_interval, self.SWITCH_INTERVAL_S))
        self.start()

    def then(self, fn: Callable[..., Any], *args: Any) -> bool:
        """``fn(*args)`` on this thread once its work so far is done (its value the result), the caller going on
        at once; False, nothing taken, where the thread has ended. One thread for work handed over piece by piece:
        a thread started per piece would allocate in an arena of its own while the one before still runs."""
        with self.lock:
            if self.ended:
                return False
            self.work.append((fn, args))
            return True

    def run(self) -> None:
        fn: Callable[..., Any] | None = None
        args: tuple = ()
        try:
            while True:
                with self.lock:
                    if not self.work:
                        self.ended = True
                        return
                    fn, args = self.work.pop(0)
                stop_if_given_up()
                self.value = fn(*args)
                fn, args = None, ()  # (the tables handed over, let go once written)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread by result()
            fn, args = None, ()  # (not kept alive by the error's traceback)
            self.error = e
            with self.lock:
                self.ended = True
                self.work.clear()

    def result(self) -> Any:
        self.join()
        sys.setswitchinterval(self.saved_interval)
        if self.error is not None:
            raise self.error
        return self.value

    def kill(self) -> None:
        """A thread cannot be killed: it is told to stop at its next :func:`stop_if_given_up` and waited for
        (its result is dropped, the work handed to it after that dropped too)."""
        self.given_up.set()
        try:
            self.result()
        except BaseException:  # noqa: BLE001 - the caller is already failing
            pass


class GivenUp(Exception):
    """Raised in a background thread whose caller gave up on it (:meth:`ThreadCall.kill`)."""


def stop_if_given_up() -> None:
    """In work that may run on a :class:`ThreadCall`: end it (:class:`GivenUp`) if its caller gave up on it, so a
    failing caller waits for one step, not the whole work. Elsewhere (a forked child is killed) nothing."""
    thread = threading.current_thread()
    if isinstance(thread, ThreadCall) and thread.given_up.is_set():
        raise GivenUp("the caller gave up on this work")


class FirstComer:
    """Work that either of two processes may do, whichever comes to it first, the other skipping it: the
    background writer once its own chain is done, or the importing process once its own work is done while the
    writer is still busy. :meth:`take` is true for the first caller only: a byte in shared memory, set under its lock,
    that a child forked after this was made shares with its parent (and threads with each other)."""

    def __init__(self, work: Callable[[], Any]):
        self.work = work
        # (the fork context's lock is unlinked at once: no resource tracker started, even where no fork follows)
        fork = "fork" in mp.get_all_start_methods()
        self._taken = mp.get_context("fork" if fork else None).Value("b", 0)

    def take(self) -> bool:
        with self._taken.get_lock():
            if self._taken.value:
                return False
            self._taken.value = 1
            return True


# ----------------------------------------------------------------------------------- worker pools


def worker_pool(workers: int, start: str = "fork") -> ProcessPoolExecutor:
    """A process pool whose workers die with this process (``start``: "fork" or "spawn").

    A forked pool reads what the caller set up before it copy-on-write; a spawned one starts a fresh
    interpreter (for a long-lived parent with threads, such as the viewer).
    """
    if start == "fork" and not can_fork():
        raise RuntimeError("dlscope may not fork this process (embedded, or no fork on this system)")
    return ProcessPoolExecutor(workers, mp_context=mp.get_context(start), initializer=_pool_child,
                               initargs=(os.getpid(),))


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Shut a pool down now: pending work cancelled and running workers killed, not waited for."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(5)


# ----------------------------------------------------------------------------------- run-owned files


@functools.lru_cache(maxsize=1)
def run_tag() -> str:
    """``dlscope-<pid>-<start time>``: this run's mark in the names of its temporary files."""
    return f"dlscope-{os.getpid()}-{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so a reused pid reads as another run;
    "0" where the system does not tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return "0"
    fields = stat[stat.rfind(b")") + 2:].split()  # the name before ")" may hold spaces
    return fields[19].decode() if len(fields) > 19 else "0"


def owned_name(stem: str, suffix: str = "") -> str:
    """A fresh file name that says which run owns it: ``<stem>.dlscope-<pid>-<start>-<random><suffix>``."""
    return f"{stem}.{run_tag()}-{secrets.token_hex(4)}{suffix}"


_TAG = re.compile(r"\.dlscope-(\d+)-(\d+)-[0-9a-f]+")


def owner_alive(name: str) -> bool:
    """Whether the run named in ``name`` (see :func:`owned_name`) is still running (True when unsure)."""
    m = _TAG.search(name)
    if m is None:
        return True
    pid, start = int(m.group(1)), m.group(2)
    if pid == os.getpid():
        return start == _start_time(pid) or start == "0"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's live process
    now = _start_time(pid)
    return now == start or now == "0" or start == "0"


def remove_dead(folder: str | Path, stem_prefix: str = "") -> list[Path]:
    """Delete the files and folders in ``folder`` that runs now dead left behind; returns what went."""
    gone: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return gone
    for name in names:
        if not name.startswith(stem_prefix) or _TAG.search(name) is None or owner_alive(name):
            continue
        path = Path(folder) / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            gone.append(path)
        except OSError:
            pass  # another cleaner got there first, or it is not ours to remove
    return gone
