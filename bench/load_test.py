"""A bounded load test of the viewer: concurrent clients on 127.0.0.1, p50/p99 latency per request kind.

Starts the viewer's server (``dlscope view``'s ``serve``) on a free port over a database made by ``dlscope
import``, lets it warm up, then runs ``--clients`` concurrent clients (asyncio + httpx, one connection each)
that each send ``--requests`` requests drawn in turn from a fixed mix of what a browser session asks for: view
JSON (dashboard, ranks, collectives, GPUs), table pages (sorted, filtered, searched, deep), an HTML page and
a static file. Every answer must be 200; the script prints one Markdown table (p50 / p99 / max per kind and
overall, requests per second) for bench/README.md.

    dlscope import ../shared/data/kineto/param_dlrm_8rank_v100 -o /tmp/dlrm.sqlite
    python bench/load_test.py --db /tmp/dlrm.sqlite --clients 16 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from viewer_bench import free_port, start_server

MIX = [
    ("dashboard JSON", "/dashboard?_format=json"),
    ("ops table, sorted by GPU time", "/api/table/ops?sort=gpu_time_ns&size=25"),
    ("ops table, sorted by calls, page 2, search", "/api/table/ops?sort=calls&page=2&q=aten"),
    ("kernels table, sorted by duration, page 5", "/api/table/kernels?sort=dur&page=5&size=50"),
    ("kernels table, name filter", "/api/table/kernels?f.kernel_name=nccl&sort=start&order=asc"),
    ("kernels, search with no match", "/api/table/kernels?q=no-such-kernel-zzz"),
    ("op types table", "/api/table/op_types"),
    ("group ops tree", "/api/table/groups?size=50"),
    ("iterations table", "/api/table/iterations"),
    ("ranks view JSON", "/ranks?_format=json"),
    ("collectives view JSON", "/collectives?_format=json"),
    ("GPUs view JSON", "/gpus?_format=json"),
    ("Ops and Kernels HTML page", "/ops-kernels"),
    ("static JS module", "/static/js/table.mjs"),
]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


async def client(base: str, offset: int, requests: int, times: dict, errors: list) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        for i in range(requests):
            label, url = MIX[(offset + i) % len(MIX)]
            t = time.perf_counter()
            r = await c.get(url)
            times[label].append((time.perf_counter() - t) * 1000)
            if r.status_code != 200:
                errors.append((label, r.status_code))


async def run(base: str, clients: int, requests: int) -> tuple[dict, list, float]:
    times: dict = defaultdict(list)
    errors: list = []
    t = time.perf_counter()
    await asyncio.gather(*(client(base, k, requests, times, errors) for k in range(clients)))
    return times, errors, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, required=True, help="a database made by dlscope import")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=100, help="requests per client")
    ap.add_argument("--warm", type=float, default=3.0, help="seconds the server warms up before the test")
    args = ap.parse_args()
    port = free_port()
    proc = start_server(args.db, port)
    base = f"http://127.0.0.1:{port}"
    try:
        time.sleep(args.warm)
        asyncio.run(run(base, 1, len(MIX)))   # one pass first: caches warm, as a user who has looked once
        times, errors, wall = asyncio.run(run(base, args.clients, args.requests))
    finally:
        proc.terminate()
        proc.wait(10)
    every = [t for ts in times.values() for t in ts]
    print(f"{args.clients} clients × {args.requests} requests = {len(every):,} requests in {wall:.1f} s "
          f"({len(every) / wall:.0f} requests/s); errors: {len(errors)}")
    print("\n| request | n | p50 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|")
    for label, _ in MIX:
        ts = times[label]
        print(f"| {label} | {len(ts)} | {statistics.median(ts):.1f} | {percentile(ts, 99):.1f} | {max(ts):.1f} |")
    print(f"| **all** | {len(every)} | **{statistics.median(every):.1f}** | **{percentile(every, 99):.1f}** | "
          f"{max(every):.1f} |")
    if errors:
        print("errors:", errors[:10])
        sys.exit(1)


if __name__ == "__main__":
    main()
