"""Static roofline chart (PNG / SVG) from a ``roofline_report`` dict, drawn with matplotlib's Agg backend.

Log-log: x = arithmetic intensity (FLOP/byte), y = achieved FLOP/s. One horizontal roof per precision the
GPU table knows, one sloped roof per memory level (L1, L2, DRAM); op dots are sized by GPU time and
coloured by bound; ncu kernels get one marker per memory level (hierarchical roofline, seed 004).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
from matplotlib.figure import Figure  # noqa: E402

LEVEL_STYLE = {"l1": ("tab:green", "L1"), "l2": ("tab:orange", "L2"), "dram": ("tab:red", "DRAM")}
BOUND_COLOR = {"memory": "tab:blue", "math": "tab:purple", None: "tab:gray"}
LABELS = 8


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _points(report: dict) -> list[tuple[float, float]]:
    pts = [(o["arithmetic_intensity"], o["achieved_flops_per_s"]) for o in report.get("ops", [])]
    for k in report.get("kernels", []):
        pts += [(k.get(f"ai_{lvl}"), k.get("achieved_flops_per_s")) for lvl in LEVEL_STYLE]
    return [(x, y) for x, y in pts if x and y and x > 0 and y > 0]


def _axis_range(report: dict, pts: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    ceilings = report.get("ceilings") or {}
    peaks = [v for v in (ceilings.get("flops_per_s") or {}).values() if v]
    bws = [v for v in (ceilings.get("bytes_per_s") or {}).values() if v]
    xs = [x for x, _ in pts] + [p / b for p in peaks for b in bws]
    ys = [y for _, y in pts] + peaks
    if not xs:
        return 1e-2, 1e4, 1e9, 1e15
    xmin = 10 ** math.floor(math.log10(min(xs)) - 0.5)
    xmax = 10 ** math.ceil(math.log10(max(xs)) + 0.5)
    ymin = 10 ** math.floor(math.log10(min(ys)) - 0.5)
    ymax = 10 ** math.ceil(math.log10(max(ys)) + 0.3)
    return xmin, xmax, ymin, ymax


def _draw_roofs(ax, report: dict, xmin: float, xmax: float, ymin: float) -> list:
    """The roofs and their labels; returns the labels' boxes (point labels keep clear of them)."""
    ceilings = report.get("ceilings") or {}
    peaks = {k: v for k, v in (ceilings.get("flops_per_s") or {}).items() if v}
    bws = {k: v for k, v in (ceilings.get("bytes_per_s") or {}).items() if v}
    top = max(peaks.values()) if peaks else None
    widest = max(bws.values()) if bws else None
    renderer = ax.figure.canvas.get_renderer()
    placed: list = []
    for level, bw in bws.items():
        color, label = LEVEL_STYLE.get(level, ("black", level))
        x_end = top / bw if top else xmax
        ax.plot([xmin, x_end], [xmin * bw, x_end * bw], color=color, lw=1.5)
        x_label = max(xmin, ymin / bw) * 1.6                   # just inside the plot, on the line's first stretch
        for _ in range(12):                                    # slide along the line until clear of the others
            text = ax.annotate(f"{label} {bw / 1e9:,.0f} GB/s", (x_label, x_label * bw), color=color, fontsize=7,
                               ha="left", va="bottom", xytext=(2, 3), textcoords="offset points")
            box = text.get_window_extent(renderer).expanded(1.02, 1.1)
            if not any(box.overlaps(b) for b in placed):
                break
            text.remove()
            x_label *= 2.2
        placed.append(box)
    same: dict[float, list[str]] = {}
    for name, peak in peaks.items():
        same.setdefault(peak, []).append(name)
    for peak, names in sorted(same.items()):
        x_start = peak / widest if widest else xmin
        tensor = all("tensor" in n for n in names)
        ax.plot([x_start, xmax], [peak, peak], color="black", lw=1, ls="--" if tensor else "-")
        text = ax.annotate(f"{' / '.join(names)} {peak / 1e12:,.1f} TFLOP/s", (xmax / 1.2, peak), ha="right",
                           va="bottom", fontsize=7)
        placed.append(text.get_window_extent(renderer))
    return placed


def _label_points(ax, ops: list[dict], placed: list) -> None:
    """Name the ops with the most GPU time, one label per name, skipping a label that would overlap another
    (``placed``: the boxes of the labels already drawn)."""
    renderer = ax.figure.canvas.get_renderer()
    seen: set[str] = set()
    for o in sorted(ops, key=lambda o: -o["gpu_time_ns"]):
        if len(seen) >= LABELS or o["op_name"] in seen:
            continue
        text = ax.annotate(_short(o["op_name"]), (o["arithmetic_intensity"], o["achieved_flops_per_s"]),
                           fontsize=6, xytext=(5, 5), textcoords="offset points")
        box = text.get_window_extent(renderer).expanded(1.05, 1.2)
        if any(box.overlaps(b) for b in placed):
            text.remove()
            continue
        placed.append(box)
        seen.add(o["op_name"])


def _draw_points(ax, report: dict, placed: list) -> None:
    ops = [o for o in report.get("ops", []) if (o.get("arithmetic_intensity") or 0) > 0
           and (o.get("achieved_flops_per_s") or 0) > 0]
    if ops:
        longest = max(o["gpu_time_ns"] for o in ops) or 1
        for bound in ("memory", "math", None):
            group = [o for o in ops if o.get("bound") == bound]
            if group:
                ax.scatter([o["arithmetic_intensity"] for o in group], [o["achieved_flops_per_s"] for o in group],
                           s=[12 + 300 * math.sqrt(o["gpu_time_ns"] / longest) for o in group],
                           color=BOUND_COLOR[bound], alpha=0.6, edgecolors="black", linewidths=0.4,
                           label=f"ops ({bound or 'no roof'} bound)" if bound else "ops (no roof)")
        above = [o for o in ops if o.get("above_roof")]
        if above:
            ax.scatter([o["arithmetic_intensity"] for o in above], [o["achieved_flops_per_s"] for o in above],
                       s=[12 + 300 * math.sqrt(o["gpu_time_ns"] / longest) for o in above], facecolors="none",
                       edgecolors="tab:red", linewidths=1.4,
                       label=f"above its roof ({len(above)}): see the note below")
        _label_points(ax, ops, placed)
    kernels = [k for k in report.get("kernels", []) if (k.get("achieved_flops_per_s") or 0) > 0]
    for level, (color, label) in LEVEL_STYLE.items():
        pts = [(k[f"ai_{level}"], k["achieved_flops_per_s"]) for k in kernels if (k.get(f"ai_{level}") or 0) > 0]
        if pts:
            ax.scatter(*zip(*pts), marker="^", color=color, s=28, edgecolors="black", linewidths=0.3,
                       label=f"kernels ({label} intensity)")


def roofline_figure(report: dict) -> Figure:
    """The chart as a matplotlib Figure (callers save or embed it)."""
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=110)
    pts = _points(report)
    xmin, xmax, ymin, ymax = _axis_range(report, pts)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ax.set_ylim(ymin, ymax)
    fig.canvas.draw()  # the scales are set: text boxes can be measured
    placed = _draw_roofs(ax, report, xmin, xmax, ymin)
    _draw_points(ax, report, placed)
    gpu = (report.get("ceilings") or {}).get("name") or ((report.get("gpu") or {}).get("name")) or "unknown GPU"
    title = f"Roofline — {gpu}"
    if not report.get("ceilings"):
        title += " (ceilings unknown: pass --gpu-spec)"
    if not pts:
        ax.text(0.5, 0.5, "no op or kernel with FLOPs, bytes and GPU time", transform=ax.transAxes,
                ha="center", va="center", color="gray")
    ax.set_title(title)
    ax.set_xlabel("Arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("Performance (FLOP/s)")
    ax.grid(True, which="major", ls=":", lw=0.5)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=7, markerscale=0.5)
    above = [o for o in report.get("ops", []) if o.get("above_roof")]
    if above:
        reasons = list(dict.fromkeys(o["above_roof_reason"] for o in above))
        lines = textwrap.wrap(f"Red rings: {len(above)} op(s) above their roof. " + " Or: ".join(reasons), 170)
        fig.text(0.01, 0.005, "\n".join(lines), fontsize=6.5, color="tab:red", va="bottom", ha="left")
        fig.tight_layout(rect=(0, 0.025 * len(lines) + 0.01, 1, 1))
    else:
        fig.tight_layout()
    return fig


def write_roofline_chart(report: dict, stem: str | Path, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Write ``<stem>.png`` / ``<stem>.svg``; returns the written paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig = roofline_figure(report)
    written = []
    try:
        for fmt in formats:
            path = stem.with_name(f"{stem.name}.{fmt}")
            fig.savefig(path, format=fmt)
            written.append(path)
    finally:
        plt.close(fig)
    return written
