"""Wall time, CPU time and memory of one command, counting every process it starts.

dlscope forks helper processes (a second parse worker, the database writer) that share the parent's
memory copy-on-write. ``/usr/bin/time`` reports the largest single process's peak RSS, which misses the
helpers; the sum of RSS over the process tree counts shared pages twice. The honest figure is the peak of
the tree's summed PSS (proportional set size: each shared page split among its sharers), sampled here
every 50 ms from ``/proc/PID/smaps_rollup``. Both are reported. Reading smaps costs CPU that the measured
command would otherwise use (on 2 cores it slowed dlscope's import by ~10%), so times come from runs
without sampling and memory from separate sampled runs.
"""

from __future__ import annotations

import collections
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

SAMPLE_S = 0.05


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def measured(cmd: list[str], sample_memory: bool = False, env: dict | None = None) -> dict:
    """Run ``cmd``; wall s, CPU s (user + system, helpers included), peak RSS of the largest single process
    (MiB, from /usr/bin/time) and, with ``sample_memory``, peak summed PSS of the process tree (MiB)."""
    timer = psutil.Popen(["/usr/bin/time", "-f", "%e %U %S %M", *cmd], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env)
    peak_pss = 0
    while sample_memory and timer.poll() is None:
        try:
            tree = timer.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        peak_pss = max(peak_pss, sum(pss_bytes(p.pid) for p in tree))
        time.sleep(SAMPLE_S)
    stderr = timer.communicate()[1]
    if timer.returncode != 0:
        raise subprocess.CalledProcessError(timer.returncode, cmd, stderr=stderr)
    wall, user, system, rss_kb = stderr.strip().splitlines()[-1].split()
    return {"wall_s": float(wall), "cpu_s": float(user) + float(system), "peak_rss_mib": int(rss_kb) / 1024,
            "peak_pss_tree_mib": peak_pss / 2**20 if sample_memory else None}


def high_water_by_line(call, capture: Path) -> tuple[Any, collections.Counter[str], float]:
    """``call()`` under memray (measuring only): its result, the bytes live at its high-water mark per dlscope
    line that allocated them (``(outside dlscope)`` for the rest), and its CPU seconds (memray's included)."""
    import memray

    cpu = time.process_time()
    with memray.Tracker(capture):
        result = call()
    cpu = time.process_time() - cpu
    by_line: collections.Counter[str] = collections.Counter()
    for record in memray.FileReader(capture).get_high_watermark_allocation_records(merge_threads=True):
        line = next((f"{file.split('dlscope/')[-1]}:{lineno} {fn}" for fn, file, lineno
                     in record.stack_trace() if "dlscope" in file), "(outside dlscope)")
        by_line[line] += record.size
    return result, by_line, cpu
