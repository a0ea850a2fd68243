"""Memory in the Timeline API: per device, allocated and reserved bytes as counter lanes whose per-pixel level of
detail never loses a peak. Checked against the raw trace's ``[memory]`` events read by the standard library: the
largest value a window shows equals the largest value the counter takes in it, at several widths, for a trace
with the allocator's totals and for one with deltas only."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import data_file, sql
from raw_kineto import memory_samples
from starlette.testclient import TestClient

from dlscope.viewer.app import create_app

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BASE = "http://127.0.0.1:8000"
TOTALS = ("kineto", "hta_v100_rank1of2_5steps.json.gz")          # allocated and reserved totals per sample
DELTAS = ("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")  # 2021 Kineto: deltas only


def raw_levels(path) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """(device, counter) -> [(ts, bytes after the sample)] in time order (file order for equal times): the
    allocator's totals, else the deltas summed from the trace's start."""
    by_device = defaultdict(list)
    for s in sorted(memory_samples(path), key=lambda s: (s.ts, s.index)):
        by_device[s.device].append(s)
    out = {}
    for device, samples in by_device.items():
        if all(s.allocated is None for s in samples):
            running, levels = 0, []
            for s in samples:
                running += s.delta
                levels.append((s.ts, running))
            out[(device, "allocated")] = levels
            continue
        out[(device, "allocated")] = [(s.ts, int(s.allocated)) for s in samples]
        if device >= 0:
            out[(device, "reserved")] = [(s.ts, int(s.reserved)) for s in samples]
    return out


def raw_max(levels: list[tuple[int, int]], start: int, end: int) -> int | None:
    """The largest value the counter takes in [start, end): the value carried in, and each sample inside."""
    before = [v for t, v in levels if t < start]
    inside = [v for t, v in levels if start <= t < end]
    values = ([before[-1]] if before else []) + inside
    return max(values) if values else None


def shown_max(cell: dict) -> int | None:
    values = ([cell["before"]] if cell["before"] is not None else []) + cell["max"]
    return max(values) if values else None


def check_windows(db, path, widths):
    levels = raw_levels(path)
    rank = sql(db, "SELECT rank FROM aggregations ORDER BY agg_id DESC LIMIT 1")[0][0]
    windows = sql(db, 'SELECT iteration, start, "end" FROM agg_iterations WHERE agg_id = '
                      "(SELECT MAX(agg_id) FROM aggregations) ORDER BY iteration")
    assert windows
    checked = 0
    points = {key: set(values) for key, values in levels.items()}
    with TestClient(create_app([db]), base_url=BASE) as c:
        for width in widths:
            for iteration, start, end in windows:
                body = c.get("/api/timeline", params={"rank": rank, "start": start, "end": end,
                                                      "width": width}).json()
                lanes = {(lane["device"], lane["counter"]): lane for lane in body["lanes"] if lane["kind"] == "counter"}
                assert set(lanes) == set(levels)
                for key, lane in lanes.items():
                    cell = body["data"].get(str(lane["id"]), {}).get("counter")
                    expected = raw_max(levels[key], start, end)
                    assert (shown_max(cell) if cell else None) == expected, (key, iteration, width)
                    if cell and cell["col"]:
                        assert all(0 <= col < width for col in cell["col"])
                        # the time sent with a column's max is a sample of that value in that column
                        origin = int(body["origin"])
                        for top, at in zip(cell["max"], cell["max_at"]):
                            assert (origin + at, top) in points[key]
                    checked += expected is not None
    return checked


@pytest.mark.parametrize("trace", [TOTALS, DELTAS], ids=["totals", "deltas"])
def test_the_largest_memory_value_of_each_iteration_window_is_the_raw_maximum(import_db, trace):
    db = import_db(data_file(*trace))
    assert check_windows(db, data_file(*trace), widths=(1, 7, 640, 8192)) > 0


def test_memory_lanes_head_their_gpu_group_and_scale_to_the_device_peak(import_db):
    path = data_file(*TOTALS)
    db = import_db(path)
    levels = raw_levels(path)
    with TestClient(create_app([db]), base_url=BASE) as c:
        t = c.get("/timeline", params={"_format": "json"}).json()["timeline"]
        body = c.get("/api/timeline", params={"rank": t["rank"], "start": t["start"], "end": t["end"]}).json()
    gpu = [lane for lane in body["lanes"] if lane["group"].startswith("GPU ")]
    device = gpu[0]["device"]
    first = [lane["kind"] for lane in gpu if lane["device"] == device][:2]
    assert first == ["counter", "counter"]
    for lane in body["lanes"]:
        if lane["kind"] == "counter":
            peak = max(v for _, v in levels[(lane["device"], lane["counter"])])
            assert lane["peak"] == peak
            both = [v for (d, _), vs in levels.items() if d == lane["device"] for _, v in vs]
            assert lane["scale_max"] == max(both)
    cpu = [lane for lane in body["lanes"] if lane["kind"] == "counter" and lane["device"] == -1]
    assert [lane["counter"] for lane in cpu] == ["allocated"]  # the CPU allocator reserves nothing
