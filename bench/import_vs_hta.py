"""Import speed and peak memory: `dlscope import` vs HolisticTraceAnalysis on one large real-shaped trace.

The trace is a real Kineto trace from ../shared/data/kineto repeated end to end (timestamps shifted past the
previous copy, correlation / External ids / flow ids / ProfilerStep numbers renumbered) until it holds more
than a million events. Both tools run one after the other in separate processes on the same file; wall
time, CPU time and memory (peak RSS of the largest process and peak PSS summed over every process
the command starts) come from ``measure.py``. dlscope runs twice: with ``-q`` (the import alone) and as users
run it by default, printing the summary after the import (`dlscope import TRACE -o DB`).

    python bench/import_vs_hta.py [--hta-python /path/to/venv-with-hta/bin/python] [--copies 5] [--repeat 3]
                                  [--tracelens-python /path/to/venv-with-tracelens/bin/python]

HTA: `TraceAnalysis(trace_dir=...)` plus `get_gpu_kernel_breakdown()`, as a user would run it.
TraceLens (AMD's, installed from its repository: the PyPI project of that name is an unrelated package), two
rows: its tree build (`TreePerfAnalyzer.from_file`) and its performance report
(`generate_perf_report_pytorch`, CSV output), the entry points ../shared/research/baseline.md measured.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from measure import measured

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPO.parent / "shared" / "data" / "kineto" / "hta_v100_rank1of2_5steps.json.gz"
STEP = re.compile(r"^ProfilerStep#(\d+)$")

HTA_SCRIPT = """
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
kernel_type, kernels = analyzer.get_gpu_kernel_breakdown(visualize=False)
print(len(kernels))
"""


TRACELENS_TREE = """
import sys
from TraceLens import TreePerfAnalyzer
analyzer = TreePerfAnalyzer.from_file(sys.argv[1])
print(len(analyzer.tree.events))
"""

TRACELENS_REPORT = """
import sys
from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
generate_perf_report_pytorch(sys.argv[1], output_csvs_dir=sys.argv[2])
"""


def replicate(source: Path, copies: int, out: Path) -> int:
    """Write ``copies`` back-to-back copies of the source trace's events; returns the event count."""
    with gzip.open(source, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    timed = [e for e in events if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed)
    steps = [int(m.group(1)) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    id_span = 1 + max([e.get("id", 0) for e in events if isinstance(e.get("id"), int)] +
                      [e.get("args", {}).get(k, 0) for e in events for k in ("correlation", "External id")
                       if isinstance(e.get("args", {}).get(k), int)])
    out_events = []
    for c in range(copies):
        shift, id_shift = c * (span + 1000), c * id_span
        for e in events:
            if e.get("ph") == "M" and c:
                continue
            e = dict(e)
            if "ts" in e:
                e["ts"] = e["ts"] + shift
            if isinstance(e.get("id"), int):
                e["id"] += id_shift
            if "args" in e:
                args = e["args"] = dict(e["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] += id_shift
            m = STEP.match(str(e.get("name", "")))
            if m:
                e["name"] = f"ProfilerStep#{int(m.group(1)) + c * step_span}"
            out_events.append(e)
    doc["traceEvents"] = out_events
    out.write_text(json.dumps(doc))
    return len(out_events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis installed (optional)")
    ap.add_argument("--tracelens-python", help="python of a venv with AMD's TraceLens installed (optional)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlscope-bench-") as tmp:
        trace_dir = Path(tmp) / "trace"
        trace_dir.mkdir()
        trace = trace_dir / "rank0.json"
        n = replicate(args.source, args.copies, trace)
        size_mb = trace.stat().st_size / 1e6
        print(f"trace: {n:,} events, {size_mb:.0f} MB ({args.copies} copies of {args.source.name})")
        dlscope = [sys.executable, "-m", "dlscope", "import", str(trace), "-o", str(Path(tmp) / "run.sqlite"),
                   "--force"]
        commands = {"dlscope": [*dlscope, "-q"], "dlscope+summary": dlscope}
        if args.hta_python:
            commands["hta"] = [args.hta_python, "-c", HTA_SCRIPT, str(trace_dir)]
        if args.tracelens_python:
            commands["tl-tree"] = [args.tracelens_python, "-c", TRACELENS_TREE, str(trace)]
            commands["tl-report"] = [args.tracelens_python, "-c", TRACELENS_REPORT, str(trace), str(Path(tmp) / "tl")]
        rows = {tool: [] for tool in commands}
        for _ in range(args.repeat):  # timed runs, one after the other
            for tool, cmd in commands.items():
                rows[tool].append(measured(cmd))
        memory = {tool: measured(cmd, sample_memory=True) for tool, cmd in commands.items()}
        med = {tool: {"wall_s": statistics.median(r["wall_s"] for r in runs),
                      "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                      "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
                      "peak_pss_tree_mib": memory[tool]["peak_pss_tree_mib"]} for tool, runs in rows.items()}
        for tool, m in med.items():
            print(f"{tool:15s} median wall {m['wall_s']:6.2f} s   CPU {m['cpu_s']:6.2f} s   "
                  f"peak RSS (largest process) {m['peak_rss_mib']:6.0f} MiB   "
                  f"peak PSS (all processes) {m['peak_pss_tree_mib']:6.0f} MiB   runs: "
                  + ", ".join(f"{r['wall_s']:.2f}s" for r in rows[tool]))
        d, shown = med["dlscope"], med["dlscope+summary"]
        print(f"the summary printed by default adds {shown['wall_s'] - d['wall_s']:.2f} s wall, "
              f"{shown['cpu_s'] - d['cpu_s']:.2f} s CPU")
        for tool in ("tl-tree", "tl-report"):
            if tool in med:
                print(f"vs TraceLens {tool[3:]}: {med[tool]['wall_s'] / d['wall_s']:.1f}x wall; memory "
                      f"{d['peak_pss_tree_mib'] / med[tool]['peak_pss_tree_mib']:.2f}x (PSS, all processes)")
        if "hta" in med:
            h = med["hta"]
            for label, m in (("-q", d), ("default, with its summary", shown)):
                print(f"speed-up ({label}) {h['wall_s'] / m['wall_s']:.1f}x wall, {h['cpu_s'] / m['cpu_s']:.1f}x CPU; "
                      f"memory {m['peak_pss_tree_mib'] / h['peak_pss_tree_mib']:.2f}x of HTA's (PSS, all processes), "
                      f"{m['peak_rss_mib'] / h['peak_rss_mib']:.2f}x (RSS, largest process)")


if __name__ == "__main__":
    main()
