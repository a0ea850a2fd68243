"""Timeline speed in headless Chromium on a window of more than a million events: first paint and zoom steps.

Builds (once) a database from the large benchmark trace (``import_vs_hta.replicate``: a real Kineto trace repeated
end to end, 9 copies: 1.1M ops, runtime calls, kernels, memory operations and annotations on one rank), starts
``dlscope view``'s server, and opens ``/timeline`` on the rank's whole time range in Debian's Chromium:

- first paint, cold: the server has just started and reads the rank into memory while the page waits (once per
  repeat, each on a freshly started server; the import stores the rank's arrays, so this is a few blobs read);
- first paint, warm: a new page once the rank is in memory (the viewer reads the shown rank at start-up);
- zoom steps: the "+" button's step (the window halves around its middle, is refetched and painted), 8 steps in
  from the whole rank and 8 back out, timed in the page from the click to the new window's paint.

    python bench/timeline_bench.py [--copies 9] [--repeat 3] [--db bench/out/timeline.sqlite]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from import_vs_hta import DEFAULT_SOURCE, replicate
from viewer_bench import free_port, start_server

OUT = Path(__file__).resolve().parent / "out"
CHROMIUM = "/usr/bin/chromium"
TABLES = ("op_instances", "api_calls", "kernels", "memops", "ranges")


def build(source: Path, copies: int, target: Path) -> None:
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "timeline_bench.json"
        n = replicate(source, copies, trace)
        print(f"replicated {source.name} {copies}x: {n:,} trace events; importing …", flush=True)
        subprocess.run([sys.executable, "-m", "dlscope", "import", str(trace), "-o", str(target), "--force"],
                       check=True, stdout=subprocess.DEVNULL)


def window_events(db: Path) -> tuple[int, int, int, dict]:
    """(rank, first start, last end, events per table) of the rank with the most kernels."""
    conn = sqlite3.connect(db)
    rank = conn.execute("SELECT rank FROM kernels GROUP BY rank ORDER BY COUNT(*) DESC LIMIT 1").fetchone()[0]
    counts, lo, hi = {}, None, None
    for t in TABLES:
        n, a, b = conn.execute(f'SELECT COUNT(*), MIN(start), MAX("end") FROM {t} WHERE rank = ?', (rank,)).fetchone()
        counts[t] = n
        if n:
            lo, hi = min(a, lo if lo is not None else a), max(b, hi if hi is not None else b)
    conn.close()
    return rank, lo, hi + 1, counts


def first_paint(browser, url: str) -> dict:
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0", timeout=120_000)
    wall = (time.perf_counter() - t) * 1000
    got = page.evaluate("({ at: window.dlscopeTimeline.firstPaintAt, fetch: window.dlscopeTimeline.lastFetchMs, "
                        "paint: window.dlscopeTimeline.lastPaintMs, counts: window.dlscopeTimeline.counts() })")
    return {"page": page, "wall_ms": wall, **got}


ZOOM = """async (factor) => {
  const t = performance.now();
  await window.dlscopeTimeline.zoom(factor);
  const tl = window.dlscopeTimeline;
  return { ms: performance.now() - t, fetch: tl.lastFetchMs, paint: tl.lastPaintMs,
           events: Object.values(tl.counts()).reduce((a, b) => a + b, 0) };
}"""


ECHARTS = """async (n) => {
  const echarts = await import('/static/vendor/echarts.esm.min.mjs');
  const box = document.createElement('div');
  box.style.cssText = 'width:1600px;height:800px;position:absolute;top:0;left:0';
  document.body.append(box);
  const data = Array.from({ length: n }, (_, i) => [i % 40, (i * 7919) % 1000000, ((i * 7919) % 1000000) + 20]);
  const c = echarts.init(box, null, { renderer: 'canvas' });
  const t = performance.now();
  await new Promise((resolve) => {
    c.on('finished', resolve);
    c.setOption({ animation: false, xAxis: { type: 'value', min: 0, max: 1000020 },
      yAxis: { type: 'value', min: 0, max: 40 }, series: [{ type: 'custom', data, encode: { x: [1, 2], y: 0 },
      renderItem: (params, api) => {
        const a = api.coord([api.value(1), api.value(0)]), b = api.coord([api.value(2), api.value(0)]);
        return { type: 'rect', shape: { x: a[0], y: a[1] - 8, width: Math.max(1, b[0] - a[0]), height: 16 },
                 style: { fill: '#1e88e5' } };
      } }] });
  });
  const first = performance.now() - t;
  const t2 = performance.now();
  await new Promise((resolve) => {
    c.on('finished', resolve);
    c.setOption({ xAxis: { min: 0, max: 500010 } });
  });
  const zoom = performance.now() - t2;
  c.dispose(); box.remove();
  return { first, zoom };
}"""


def echarts_custom_series(browser, base: str, shapes: int) -> dict:
    """The bundled ECharts drawing ``shapes`` rectangles with a custom series (the alternative to our canvas)."""
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(base + "/timeline")
    page.wait_for_function("window.dlscopeTimeline && window.dlscopeTimeline.paints > 0", timeout=120_000)
    out = page.evaluate(ECHARTS, shapes)
    page.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--copies", type=int, default=9)
    ap.add_argument("--db", type=Path, default=OUT / "timeline.sqlite")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    build(args.source, args.copies, args.db)
    rank, lo, hi, counts = window_events(args.db)
    total = sum(counts.values())
    print(f"rank {rank}: {total:,} events in the window ({', '.join(f'{t} {n:,}' for t, n in counts.items())})")
    from playwright.sync_api import sync_playwright

    colds = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for _ in range(args.repeat):
            port = free_port()
            server = start_server(args.db, port)
            try:
                cold = first_paint(browser, f"http://127.0.0.1:{port}/timeline?rank={rank}&start={lo}&end={hi}")
                cold["page"].close()
            finally:
                server.terminate()
                server.wait(10)
            colds.append(cold)
            print(f"first paint, cold server: {cold['at']:.0f} ms after navigation "
                  f"(request {cold['fetch']:.0f} ms, canvas {cold['paint']:.1f} ms); "
                  f"{sum(cold['counts'].values()):,} events in view", flush=True)
        browser.close()
    print(f"first paint, cold: median {statistics.median(c['at'] for c in colds):.0f} ms, "
          f"max {max(c['at'] for c in colds):.0f} ms")
    port = free_port()
    server = start_server(args.db, port)
    url = f"http://127.0.0.1:{port}/timeline?rank={rank}&start={lo}&end={hi}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            warm, steps_in, steps_out = [], [], []
            for _ in range(args.repeat):
                fp = first_paint(browser, url)
                warm.append(fp)
                page = fp["page"]
                for _ in range(args.steps):
                    steps_in.append(page.evaluate(ZOOM, 0.5))
                for _ in range(args.steps):
                    steps_out.append(page.evaluate(ZOOM, 2))
                page.close()
            shapes = 30_000
            ec = echarts_custom_series(browser, f"http://127.0.0.1:{port}", shapes)
            print(f"ECharts custom series, {shapes:,} rectangles (what a full window draws): first draw "
                  f"{ec['first']:.0f} ms, redraw after a zoom {ec['zoom']:.0f} ms")
            browser.close()
    finally:
        server.terminate()
        server.wait(10)
    at = [w["at"] for w in warm]
    print(f"first paint, warm: median {statistics.median(at):.0f} ms, max {max(at):.0f} ms after navigation "
          f"(request median {statistics.median(w['fetch'] for w in warm):.0f} ms, "
          f"canvas {statistics.median(w['paint'] for w in warm):.1f} ms)")
    for label, steps in (("zoom in", steps_in), ("zoom out", steps_out)):
        ms = [s["ms"] for s in steps]
        print(f"{label} step ({len(ms)}): median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms "
              f"(request median {statistics.median(s['fetch'] for s in steps):.0f} ms, canvas median "
              f"{statistics.median(s['paint'] for s in steps):.1f} ms); events in view from "
              f"{min(s['events'] for s in steps):,} to {max(s['events'] for s in steps):,}")
    big = [s["ms"] for s in steps_in + steps_out if s["events"] >= 1_000_000]
    if big:
        print(f"steps landing on a window of >= 1M events ({len(big)}): median {statistics.median(big):.0f} ms, "
              f"max {max(big):.0f} ms")


if __name__ == "__main__":
    main()
