"""Benchmark: a 64-rank job (serial vs worker processes vs Dask vs HTA) and a large single trace's peak
memory with and without --max-memory. Writes figures as JSON lines to stdout; see bench/README.md.

    python bench/distributed_bench.py job  [--copies 8] [--hta /tmp/hta-venv/bin/python] [--repeat 3]
                                           [--modes cli,cli-summary,serial,workers2,dask,rank-by-rank]
                                           [--memory]
                                           [--tree OTHER_CHECKOUT/src ...]
    python bench/distributed_bench.py big  [--repeat 60] [--max-memory 8GB,4GB]
    python bench/distributed_bench.py bigjob [--ranks 4] [--repeat 20] [--max-memory 3GB]
    python bench/distributed_bench.py scaling [--copies 8] [--repeat 3]   # parallel efficiency, markdown table

The job is built from the 8 real rank traces of ../shared/data/kineto/param_dlrm_8rank_v100: copy k of
rank r becomes rank 8k+r, its timestamps shifted by k ms, its ids (External id, correlation, Ev Idx)
renumbered, distributedInfo rewritten. The big trace repeats the events of the largest real trace,
shifted in time and renumbered, into one gzip file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import measured

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "kineto"
OUT = REPO / "bench" / "out"
ID_KEYS = ("External id", "correlation", "Ev Idx", "Record function id")


def _shift(events: list[dict], dt_us: float, id_offset: int) -> list[dict]:
    out = []
    for e in events:
        e = dict(e)
        if "ts" in e and isinstance(e["ts"], (int, float)):
            e["ts"] = e["ts"] + dt_us
        if "id" in e and isinstance(e["id"], int):
            e["id"] += id_offset
        if isinstance(e.get("args"), dict):
            args = dict(e["args"])
            for key in ID_KEYS:
                if isinstance(args.get(key), int):
                    args[key] += id_offset
            e["args"] = args
        out.append(e)
    return out


def make_job(copies: int) -> Path:
    folder = OUT / f"job{8 * copies}"
    if folder.exists() and len(list(folder.iterdir())) == 8 * copies:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(8):
        trace = json.load(gzip.open(DATA / "param_dlrm_8rank_v100" / f"worker{r}.pt.trace.json.gz"))
        for k in range(copies):
            rank = 8 * k + r
            t = dict(trace)
            t["distributedInfo"] = {**trace["distributedInfo"], "rank": rank, "world_size": 8 * copies}
            t["traceEvents"] = _shift(trace["traceEvents"], k * 1000.0, k * 10_000_000)
            with gzip.open(folder / f"rank-{rank}.pt.trace.json.gz", "wt", compresslevel=3) as f:
                json.dump(t, f)
    return folder


def make_big(repeat: int) -> Path:
    path = OUT / f"big_x{repeat}.json.gz"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    trace = json.load(gzip.open(DATA / "hta_v100_rank1of2_5steps.json.gz"))
    events = trace.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e["ts"] for e in events if "ts" in e)
    with gzip.open(path, "wt", compresslevel=3) as f:
        f.write(json.dumps(trace)[:-1] + ', "traceEvents": [')
        first = True
        for k in range(repeat):
            for e in _shift(events, k * (span + 1000.0), k * 10_000_000):
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write("]}")
    return path


def run(cmd: list[str]) -> dict:
    """Wall and CPU s of one command in a fresh process (helpers included), then its memory from a second,
    sampled run: peak RSS of the largest process and peak summed PSS of its process tree (bench/measure.py)."""
    timed = measured(cmd)
    sampled = measured(cmd, sample_memory=True)
    return {"wall_s": timed["wall_s"], "cpu_s": round(timed["cpu_s"], 2),
            "peak_rss_mib": round(sampled["peak_rss_mib"]), "peak_pss_tree_mib": round(sampled["peak_pss_tree_mib"])}


IMPORT = """
import sys, json
from dlscope import pipeline
from dlscope.pipeline.inputs import expand_inputs
workers, scheduler, max_memory = int(sys.argv[3]), sys.argv[4] or None, sys.argv[5] or None
cluster = None
if scheduler == "local":
    from distributed import LocalCluster
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
    scheduler = cluster.scheduler_address
pipeline.build_database(expand_inputs([sys.argv[1]]), sys.argv[2], force=True, progress=False, workers=workers,
                        scheduler=scheduler, max_memory=max_memory)
if cluster: cluster.close()
"""

HTA = """
import sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
b = a.get_temporal_breakdown(visualize=False)
print(len(a.t.traces), "ranks", b.shape)
"""


#: the job bench's dlscope runs: label, workers, scheduler, budget (workers 0: the CLI's default)
JOB_MODES = {"cli": ("`dlscope import -q` (defaults)", 0, "", ""),
             "cli-summary": ("`dlscope import` (defaults, the summary printed)", 0, "", ""),
             "serial": ("serial", 1, "", ""),
             "workers2": ("workers=2", 2, "", ""), "dask": ("dask LocalCluster 2 procs", 2, "local", ""),
             "rank-by-rank": ("rank by rank, --max-memory 600MB", 1, "", "600MB")}


def _median_run(cmds: list[tuple[str, list[str], dict]], repeat: int, memory: bool) -> None:
    """Each command ``repeat`` times, interleaved (load from other work hits all alike); the median wall and
    its CPU, every wall time, and (``memory``) one extra sampled run per command for its memory."""
    walls: dict[str, list[dict]] = {label: [] for label, _, _ in cmds}
    for _ in range(repeat):
        for label, cmd, env in cmds:
            walls[label].append(measured(cmd, env=env))
    for label, cmd, env in cmds:
        runs = sorted(walls[label], key=lambda r: r["wall_s"])
        mid = runs[len(runs) // 2]
        out = {"bench": label, "wall_s": mid["wall_s"], "cpu_s": round(mid["cpu_s"], 2),
               "walls": [r["wall_s"] for r in walls[label]]}
        if memory:
            sampled = measured(cmd, sample_memory=True, env=env)
            out.update(peak_rss_mib=round(sampled["peak_rss_mib"]),
                       peak_pss_tree_mib=round(sampled["peak_pss_tree_mib"]))
        print(json.dumps(out), flush=True)


def bench_job(args) -> None:
    folder = make_job(args.copies)
    db = Path(tempfile.mkdtemp()) / "job.sqlite"
    py = sys.executable
    ranks = 8 * args.copies
    cmds = []
    for tree in args.tree or [str(REPO / "src")]:
        env = {**os.environ, "PYTHONPATH": tree}
        name = "" if not args.tree else f" [{tree}]"
        for mode in args.modes.split(","):
            label, workers, scheduler, budget = JOB_MODES[mode]
            quiet = [] if mode == "cli-summary" else ["--quiet"]
            cmd = ([py, "-m", "dlscope", "import", str(folder), "-o", str(db), "--force", *quiet] if workers == 0
                   else [py, "-c", IMPORT, str(folder), str(db), str(workers), scheduler, budget])
            cmds.append((f"{ranks}-rank job, dlscope {label}{name}", cmd, env))
    if args.hta and Path(args.hta).exists():
        cmds.append((f"{ranks}-rank job, HTA 0.5.0 TraceAnalysis + temporal breakdown",
                     [args.hta, "-c", HTA, str(folder)], dict(os.environ)))
    _median_run(cmds, args.repeat, args.memory)
    if db.exists():
        os.unlink(db)


def bench_big(args) -> None:
    path = make_big(args.repeat)
    with gzip.open(path) as f:
        size = sum(len(chunk) for chunk in iter(lambda: f.read(1 << 24), b""))
    what = f"{path.stat().st_size / 1e6:.0f} MB gz / {size / 1e9:.2f} GB JSON"
    probe = ("import sys; from dlscope.importers.kineto import load_kineto; "
             "load_kineto(sys.argv[1], max_memory=int(sys.argv[2]) if sys.argv[2] else None)")
    from dlscope.pipeline.budget import parse_size

    budgets = args.max_memory.split(",")
    for label, budget in (("in memory", ""), ("streamed", str(parse_size(budgets[-1])))):
        r = run([sys.executable, "-c", probe, str(path), budget])
        print(json.dumps({"bench": f"Kineto parse of {what}, {label}", **r}), flush=True)
    db = Path(tempfile.mkdtemp()) / "big.sqlite"
    for budget in budgets:
        cmd = [str(Path(sys.executable).with_name("dlscope")), "import", str(path), "-o", str(db), "--force",
               "--quiet", "--max-memory", budget]
        try:
            r = run(cmd)
        except subprocess.CalledProcessError as e:  # refused: the one-line reason, and what it cost to say so
            r = {"exit": e.returncode, "stderr": e.stderr.strip().splitlines()[0]}
        print(json.dumps({"bench": f"dlscope import of {what}, --max-memory {budget}", **r}), flush=True)
    if db.exists():
        os.unlink(db)


def bench_bigjob(args) -> None:
    """A job of large ranks: whole (every rank in memory at once) against rank by rank under a budget."""
    big = make_big(args.repeat)
    folder = OUT / f"bigjob_{args.ranks}x{args.repeat}"
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(args.ranks):  # the same trace as every rank; ranks from the file names
        link = folder / f"rank-{rank}.json.gz"
        if not link.exists():
            link.symlink_to(big)
    db = Path(tempfile.mkdtemp()) / "bigjob.sqlite"
    dlscope = str(Path(sys.executable).with_name("dlscope"))
    for label, extra in (("whole (no budget)", []), (f"rank by rank, --max-memory {args.max_memory}",
                                                      ["--max-memory", args.max_memory])):
        r = run([dlscope, "import", str(folder), "-o", str(db), "--force", "--quiet", *extra])
        print(json.dumps({"bench": f"{args.ranks}-rank job of {big.name} ranks, {label}", **r}), flush=True)
    os.unlink(db)


#: (label, N, --workers, scheduler): local worker processes, then a Dask LocalCluster of N processes
SCALING = (("local, 1 process (`--workers 1`)", 1, 1, ""), ("local, `--workers 2`", 2, 2, ""),
           ("Dask LocalCluster, 1 process", 1, 1, "local"), ("Dask LocalCluster, 2 processes", 2, 2, "local"),
           ("Dask LocalCluster, 4 processes", 4, 4, "local"))
#: columns that say when or how a database was written, not what it holds
VOLATILE = {"created_at", "run_id"}


def database_digest(db: Path) -> dict[str, str]:
    """Per table, a digest of its rows in a fixed order (VOLATILE columns and dlscope_meta's created_at and
    extra_json left out): two imports of one job hold the same data when their digests are equal."""
    import hashlib
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        out = {}
        tables = [r[0] for r in conn.execute(  # an FTS5 index's storage follows from search_names
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'search_names_trigram%' "
            "ORDER BY name")]
        for table in tables:
            cols = [f'"{r[1]}"' for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] not in VOLATILE]
            where = " WHERE key NOT IN ('created_at', 'extra_json')" if table == "dlscope_meta" else ""
            digest = hashlib.sha256()
            for row in conn.execute(f'SELECT {", ".join(cols)} FROM "{table}"{where} ORDER BY {", ".join(cols)}'):
                digest.update(repr(row).encode())
            out[table] = digest.hexdigest()
        return out
    finally:
        conn.close()


def bench_scaling(args) -> None:
    """Parallel efficiency of the job import: wall time of each configuration (median of --repeat runs), the
    speed-up over the one local process and over the one-process Dask cluster, speed-up / N, and whether every
    configuration wrote the same database. Prints a markdown table."""
    import statistics

    folder = make_job(args.copies)
    tmp = Path(tempfile.mkdtemp())
    rows, digests = [], {}
    for label, n, workers, scheduler in SCALING:
        db = tmp / f"job_{workers}_{scheduler or 'local'}.sqlite"
        runs = [measured([sys.executable, "-c", IMPORT, str(folder), str(db), str(workers), scheduler, ""])
                for _ in range(args.repeat)]
        digests[label] = database_digest(db)
        wall = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rows.append((label, n, wall, cpu, [r["wall_s"] for r in runs]))
        db.unlink()
    serial, dask1 = rows[0][2], rows[2][2]
    same = {label: d == digests[rows[0][0]] for label, d in digests.items()}
    cores = os.cpu_count()
    print(f"\n{8 * args.copies}-rank job ({folder}), {args.repeat} runs each, {cores} cores"
          f"{' (N > cores: oversubscribed)' if any(r[1] > (cores or 1) for r in rows) else ''}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end\n")
    print("| configuration | N | wall s (median) | runs | CPU s | speed-up vs 1 local process | efficiency "
          "(speed-up / N) | speed-up vs 1 Dask process | Dask efficiency | same database |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for label, n, wall, cpu, walls in rows:
        dask = f"{dask1 / wall:.2f}× | {dask1 / wall / n:.0%}" if "Dask" in label else "– | –"
        print(f"| {label} | {n} | {wall:.2f} | {', '.join(f'{w:.2f}' for w in walls)} | {cpu:.1f} | "
              f"{serial / wall:.2f}× | {serial / wall / n:.0%} | {dask} | {'yes' if same[label] else '**no**'} |")
    if not all(same.values()):
        differ = {label: sorted(t for t in d if d[t] != digests[rows[0][0]].get(t)) for label, d in digests.items()
                  if not same[label]}
        print(f"\ntables that differ from the one-process import: {differ}")
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    job = sub.add_parser("job")
    job.add_argument("--copies", type=int, default=8)
    job.add_argument("--hta", default="/tmp/hta-venv/bin/python")
    job.add_argument("--repeat", type=int, default=3, help="timed runs per command (median reported)")
    job.add_argument("--modes", default="cli,cli-summary,serial,workers2",
                     help=f"dlscope runs, of {','.join(JOB_MODES)}")
    job.add_argument("--memory", action="store_true", help="one more, sampled run per command for its memory")
    job.add_argument("--tree", action="append", help="time the dlscope of this src folder (repeatable; "
                     "default: this checkout's)")
    big = sub.add_parser("big")
    big.add_argument("--repeat", type=int, default=60)
    big.add_argument("--max-memory", default="8GB,4GB", help="budgets to import under, comma-separated")
    bigjob = sub.add_parser("bigjob")
    bigjob.add_argument("--ranks", type=int, default=4)
    bigjob.add_argument("--repeat", type=int, default=20)
    bigjob.add_argument("--max-memory", default="3GB")
    scaling = sub.add_parser("scaling")
    scaling.add_argument("--copies", type=int, default=8)
    scaling.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    {"job": bench_job, "big": bench_big, "bigjob": bench_bigjob, "scaling": bench_scaling}[args.what](args)


if __name__ == "__main__":
    main()
