"""The static roofline chart (report PNG/SVG) of a real FP32 ResNet-50 run: ops above their roof are ringed and
explained, and no two labels overlap."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import data_file


@pytest.fixture(scope="module")
def report(import_db):
    from dlscope.roofline import roofline_report
    from dlscope.store import reader

    db = import_db(data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz"))
    conn = sqlite3.connect(db)
    try:
        return roofline_report(conn, reader.current_agg_id(conn))
    finally:
        conn.close()


def test_points_above_their_roof_are_flagged_with_the_reason(report):
    above = [o for o in report["ops"] if o["pct_of_ceiling"] is not None and o["pct_of_ceiling"] > 100]
    assert above and report["summary"]["above_roof_op_nodes"] == len(above)
    assert all(o["above_roof"] for o in above)
    assert not any(o["above_roof"] for o in report["ops"] if o not in above)
    convs = [o for o in above if o["family"] == "conv" and o["bound"] == "math"]
    assert convs and all("Winograd" in o["above_roof_reason"] for o in convs)
    assert all("cache" in o["above_roof_reason"] for o in above if o["bound"] == "memory")


def test_png_labels_do_not_overlap_and_the_rings_are_explained(report):
    import matplotlib.pyplot as plt

    from dlscope.roofline.chart import roofline_figure

    fig = roofline_figure(report)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if t.get_text()]
        assert len(boxes) >= 5
        overlapping = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
        assert overlapping == []
        inside = ax.get_window_extent(renderer)
        assert all(inside.x0 - 1 <= b.x0 and b.x1 <= inside.x1 + 1 for _, b in boxes)   # not over the y label
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("above its roof (") for t in legend)
        assert any("Winograd" in t.get_text() for t in fig.texts)
    finally:
        plt.close(fig)
