"""What the tests see of processes: whether one runs, its children, its descendants. One home, built on psutil,
because a process may end between being listed and being read (a race that failed CI when /proc was read by
hand)."""

from __future__ import annotations

import os
import time

import psutil


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(pids: list[int], seconds: float = 5.0) -> list[int]:
    """The pids still running after up to ``seconds`` of waiting for them to end."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _below(pid: int, recursive: bool) -> set[int]:
    try:
        found = psutil.Process(pid).children(recursive=recursive)
    except psutil.NoSuchProcess:
        return set()
    return {child.pid for child in found if alive(child.pid)}


def children(pid: int | None = None) -> set[int]:
    """The live children of ``pid`` (this process by default)."""
    return _below(os.getpid() if pid is None else pid, recursive=False)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    return _below(pid, recursive=True)
