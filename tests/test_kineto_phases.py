"""The Kineto decoder that types events by phase (complete and instant events read, the other phases' keys
skipped), against the raw JSON read by the standard library, and its fallback to the lenient decoder for a
piece holding an event whose phase is not the format's."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import data_file
from raw_kineto import events as raw_events
from raw_kineto import memory_samples, ns

from dlscope.errors import InputError
from dlscope.importers.kineto import Reading, events, load_kineto
from dlscope.model import TABLES

#: a Kineto trace's kinds of events, with the odd values older readers took: no args, numbers written as text,
#: fractional µs, metadata without a category, an allocator sample without args (no device type: dropped),
#: an instant event that is not an allocator sample, a counter, a category no table maps
CLEAN_EVENTS: list[dict] = [
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},  # no cat
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 5, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": "1", "tid": 1, "ts": 10, "dur": 5,
     "args": {"External id": "3", "Ev Idx": 0, "Sequence number": 2.0}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20.125, "dur": 1.5},  # no args
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 2,
     "args": {"External id": 3, "cbid": 211, "correlation": 9}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3.25,
     "args": {"External id": 3, "queued": 0, "device": "0", "context": 1, "stream": 7, "correlation": 9,
              "registers per thread": "x", "grid": [1, 2, 3], "block": [4, 5, 6]}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 13, "s": "t",
     "args": {"Ev Idx": 4, "Device Type": 1, "Device Id": "0", "Addr": 140, "Bytes": 512, "Total Allocated": 512,
              "Total Reserved": 2048}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 14},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 15.5,
     "args": {"Device Type": 0, "Bytes": -512, "Total Allocated": 0}},
    {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 16, "s": "g"},
    {"ph": "C", "name": "counter", "pid": 1, "ts": 17, "args": {"value": 3}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0,
     "dur": 100},
]
#: fields of any type where no table reads them: flows, and the keys of an instant event other than a sample's
JUNK_EVENTS: list[dict] = [
    {"ph": "s", "cat": "ac2g", "id": 9, "pid": [1], "tid": {"x": 1}, "ts": 11, "bp": "e", "name": 5},
    {"ph": "f", "cat": 7, "id": 9, "pid": 0, "tid": 7, "ts": "later", "bp": "e", "name": "ac2g", "args": [1]},
    {"ph": "i", "cat": 5, "name": "marker", "pid": 1, "tid": 1, "ts": 16, "dur": [], "args": {"correlation": [1]}},
]
ODD_EVENTS = CLEAN_EVENTS[:5] + JUNK_EVENTS + CLEAN_EVENTS[5:]


def _write(path: Path, evs: list[dict]) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    return path


def _lenient_int(value) -> int:
    """The README's lenient integer: ints and numeric text (an integral float's text too), -1 otherwise."""
    try:
        return int(Decimal(str(value))) if Decimal(str(value)) == int(Decimal(str(value))) else -1
    except ArithmeticError:
        return -1


class _Spy:
    """Counts the pieces each decoder of a :class:`events.FastThenLenient` decoded."""

    def __init__(self, monkeypatch):
        self.fast = self.lenient = 0
        for pair in (events.BATCH_DECODER, events.TRAILER_DECODER):
            monkeypatch.setattr(pair, "fast", self._counting(pair.fast, "fast"))
            monkeypatch.setattr(pair, "lenient", self._counting(pair.lenient, "lenient"))

    def _counting(self, decoder, which: str):
        spy = self

        class Counting:
            def decode(self, data):
                result = decoder.decode(data)  # counted only when it decoded the piece
                setattr(spy, which, getattr(spy, which) + 1)
                return result
        return Counting()


def test_events_typed_by_phase_give_the_rows_of_the_raw_json(tmp_path, monkeypatch):
    path = _write(tmp_path / "t.json", ODD_EVENTS)
    spy = _Spy(monkeypatch)
    profile = load_kineto(path)
    assert (spy.fast, spy.lenient) == (1, 0)  # every phase is the format's: typed by phase
    raw = raw_events(path)

    ops = [e for e in raw if e.cat == "cpu_op"]
    assert profile.ops["name"].tolist() == [e.name for e in ops]
    assert profile.ops["start"].tolist() == [e.start for e in ops] == [10_000, 20_125]
    assert profile.ops["end"].tolist() == [e.end for e in ops] == [15_000, 21_625]
    assert profile.ops["pid"].tolist() == [_lenient_int(e.pid) for e in ops] == [1, 1]
    assert profile.ops["external_id"].tolist() == [_lenient_int(e.args.get("External id", -1)) for e in ops]
    assert profile.ops["seq"].tolist() == [_lenient_int(e.args.get("Sequence number", -1)) for e in ops] == [2, -1]

    (kernel,) = [e for e in raw if e.cat == "kernel"]
    row = profile.kernels.iloc[0]
    assert len(profile.kernels) == 1 and (row["start"], row["end"]) == (kernel.start, kernel.end) == (12_000, 15_250)
    assert (row["device"], row["stream"], row["correlation"]) == (0, 7, kernel.args["correlation"])
    assert [row[f"grid_{c}"] for c in "xyz"] + [row[f"block_{c}"] for c in "xyz"] == \
        kernel.args["grid"] + kernel.args["block"]
    assert row["registers"] == -1  # "x" is not a number
    (call,) = [e for e in raw if e.cat == "cuda_runtime"]
    assert profile.api_calls["correlation"].tolist() == [call.args["correlation"]]
    assert profile.ranges["name"].tolist() == ["ProfilerStep#1"]

    samples = memory_samples(path)  # the allocator samples of CUDA and the CPU, by the standard library
    memory = profile.memory
    assert memory["ts"].tolist() == [s.ts for s in samples] == [13_000, 15_500]
    assert memory["device"].tolist() == [s.device for s in samples] == [0, -1]
    assert memory["bytes_delta"].tolist() == [s.delta for s in samples] == [512, -512]
    assert memory["total_allocated"].tolist() == [s.allocated for s in samples]
    assert memory["addr"].tolist() == [140, -1]

    assert profile.meta["event_count"] == len(ODD_EVENTS)
    unmapped = {e.cat for e in raw if e.cat not in {"cpu_op", "kernel", "cuda_runtime", "user_annotation"}}
    assert profile.meta["unmapped_categories"] == {cat: 1 for cat in unmapped} == {"Trace": 1}


@pytest.mark.parametrize("odd", [{"name": "no phase", "pid": 1}, {"ph": "Q", "name": "unknown phase"}])
def test_a_piece_with_a_phase_outside_the_format_is_read_by_the_lenient_decoder_alike(tmp_path, monkeypatch, odd):
    """Every event's fields are type-checked then (as before the phase-typed decoder): no junk here."""
    clean = CLEAN_EVENTS
    typed = load_kineto(_write(tmp_path / "typed.json", clean))
    spy = _Spy(monkeypatch)
    lenient = load_kineto(_write(tmp_path / "lenient.json", clean[:3] + [odd] + clean[3:]))
    assert (spy.fast, spy.lenient) == (0, 1)
    for name in TABLES:
        pd.testing.assert_frame_equal(lenient.table(name), typed.table(name), obj=name)
    assert lenient.meta["event_count"] == len(clean) + 1


def _many_events(n: int) -> list[dict]:
    """``n`` launches (runtime call, kernel, flow) and allocator samples: a trace cut into many pieces."""
    out: list[dict] = []
    for i in range(n):
        ts = 1_000 + 10 * i
        out += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                 "dur": 2, "args": {"correlation": i}},
                {"ph": "s", "cat": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": ts, "name": "ac2g"},
                {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": f"{ts + 3}.5",
                 "dur": 1, "args": {"device": 0, "stream": 7, "correlation": i}},
                {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts + 1,
                 "args": {"Device Type": 1, "Device Id": 0, "Bytes": i, "Total Allocated": i}}]
    return out


READINGS = {"one process": Reading(processes=1, piece_bytes=4096, fallback=False),
            "two processes": Reading(processes=2, piece_bytes=4096, fallback=False),
            "streamed": Reading(method="streamed", piece_bytes=4096, block_bytes=8192, fallback=False),
            "ijson": Reading(method="ijson")}


@pytest.mark.parametrize("reading", list(READINGS))
def test_only_the_pieces_holding_an_unknown_phase_fall_back(tmp_path, monkeypatch, reading):
    evs = _many_events(400)
    evs.insert(len(evs) // 3, {"ph": "Q", "name": "not a phase of the format"})
    path = _write(tmp_path / "t.json", evs)
    spy = _Spy(monkeypatch)
    profile = load_kineto(path, reading=READINGS[reading])
    if reading in ("one process", "streamed"):  # (the spy counts this process's pieces only)
        assert spy.lenient == 1 and spy.fast > 10
    if reading == "ijson":  # one batch of re-encoded events
        assert (spy.fast, spy.lenient) == (0, 1)
    raw = raw_events(path)
    kernels = [e for e in raw if e.cat == "kernel"]
    assert profile.kernels["start"].tolist() == [e.start for e in kernels]
    assert profile.kernels["correlation"].tolist() == [e.args["correlation"] for e in kernels]
    assert profile.kernels["name"].tolist() == [e.name for e in kernels]
    assert profile.api_calls["start"].tolist() == [e.start for e in raw if e.cat == "cuda_runtime"]
    samples = memory_samples(path)
    assert profile.memory["ts"].tolist() == [s.ts for s in samples]
    assert profile.memory["bytes_delta"].tolist() == [s.delta for s in samples]
    assert profile.meta["event_count"] == len(evs)


def test_the_phases_no_table_reads_are_not_type_checked_but_the_read_ones_are(tmp_path):
    flows = [{"ph": "s", "cat": 7, "name": 5, "pid": [1], "tid": None, "ts": "x", "args": [1]}]
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
              "args": {"device": 0, "stream": 7, "correlation": 1}}
    assert len(load_kineto(_write(tmp_path / "ok.json", flows + [kernel])).kernels) == 1
    for bad in ({**kernel, "pid": [0]}, {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": True}},
                {"ph": "i", "name": "[memory]", "ts": 1, "args": 5}):
        with pytest.raises(InputError, match="not a Chrome/Kineto trace"):
            load_kineto(_write(tmp_path / "bad.json", [kernel, bad]))


def test_the_phase_typed_decoder_reads_the_events_of_a_real_trace_as_its_raw_json():
    """Every complete and instant event of a real trace, field by field, against its raw JSON."""
    path = data_file("kineto", "hta_event_sync_a100.json.gz")
    text = gzip.decompress(path.read_bytes())
    fast = events.TRAILER_DECODER.fast.decode(text).traceEvents
    raw = json.loads(text, parse_float=Decimal)["traceEvents"]
    assert len(fast) == len(raw)
    read = [(e, r) for e, r in zip(fast, raw) if r.get("ph") in ("X", "i")]
    assert read and all(e.ph == r["ph"] for e, r in read)
    assert [e.name for e, _ in read] == [r["name"] for _, r in read]
    assert np.array_equal([ns(e.ts) for e, _ in read], [ns(r["ts"]) for _, r in read])
    complete = [(e, r) for e, r in read if r["ph"] == "X"]
    assert [e.cat for e, _ in complete] == [r["cat"] for _, r in complete]
    assert [ns(e.dur) for e, _ in complete] == [ns(r.get("dur", 0)) for _, r in complete]
    assert [e.args.correlation for e, _ in complete] == [r.get("args", {}).get("correlation", -1) for _, r in complete]
    assert [e.args.external_id for e, _ in complete] == [r.get("args", {}).get("External id", -1) for _, r in complete]
