"""Fuzzing every importer (Kineto JSON, nsys SQLite, nsys stats CSV, ncu CSV) with mutated real profiles.

Hypothesis draws a real file (read at test time, never stored) and mutations of two kinds: structured ones
that know the format (a negative ``dur``, a ``ts`` past int64, a field of the wrong type, a GPU listed twice,
an end before the start in SQLite, a dropped column, a compressed container that lies) and byte-level ones
(flips, cuts, insertions). Each case runs ``dlscope import`` and :func:`fuzzing.check` holds it to the
contract against an independent oracle (see ``tests/fuzzing.py``).

In CI the cases are few and fixed (``derandomize``); for a long run (docs/fuzzing.md)::

    DLSCOPE_FUZZ=long DLSCOPE_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz_importers.py -p no:xdist \\
        --hypothesis-show-statistics
"""

from __future__ import annotations

import bz2
import copy
import csv
import gzip
import io
import json
import lzma
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import fuzzing as fz
import pytest
from conftest import requires_shared
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st


class Case(bytes):
    """A mutated file; shown as its size and a digest (Hypothesis prints the blob that reproduces it)."""

    def __repr__(self) -> str:
        import hashlib

        return f"<{len(self):,} bytes, sha1 {hashlib.sha1(self).hexdigest()[:12]}>"

LONG = os.environ.get("DLSCOPE_FUZZ") == "long"
_COMMON = {"deadline": None, "suppress_health_check": list(HealthCheck), "print_blob": True}
settings.register_profile("dlscope-ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("dlscope-long", max_examples=int(os.environ.get("DLSCOPE_FUZZ_EXAMPLES", "20000")),
                          **_COMMON)
settings.load_profile("dlscope-long" if LONG else "dlscope-ci")


def examples(ci: int) -> settings:
    """``ci`` cases per test in CI (a fixed seed); the long profile's count otherwise."""
    return settings() if LONG else settings(max_examples=ci)


pytestmark = [requires_shared, pytest.mark.slow, pytest.mark.filterwarnings("ignore")]

# ------------------------------------------------------------------------------------------ values

NUMBER_TEXT = st.sampled_from(["12.5", "1e3", " 7 ", "1_000", "\u0663", "-0", "0x10", "", "nan", "Infinity",
                               "9223372036854775.807", "9223372036854775.808", "-1e-9", "1,5"])
NUMBERS = st.one_of(
    st.sampled_from([0, -1, -5, 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**64), 10**30]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    NUMBER_TEXT,
)
ANY = st.one_of(NUMBERS, st.none(), st.booleans(), st.text(max_size=6), st.just([]), st.just({}),
                st.just([1, 2, 3]), st.just({"a": 1}))
CATEGORIES = st.sampled_from(["kernel", "Kernel", "cpu_op", "Operator", "cuda_runtime", "Runtime", "cuda_driver",
                              "gpu_memcpy", "gpu_memset", "Memcpy", "cuda_sync", "user_annotation",
                              "gpu_user_annotation", "python_function", "ac2g", ""])
ARG_KEYS = st.sampled_from([*fz.INT_ARGS, "Input Dims", "grid", "block", "Collective name", "cuda_sync_kind"])


# ------------------------------------------------------------------------------------------ Kineto

def _event(draw, doc) -> dict | None:
    events = doc["traceEvents"]
    if not events:
        return None
    e = events[draw(st.integers(0, len(events) - 1))]
    return e if isinstance(e, dict) else None


def _mutate_kineto(draw, doc: dict, texts: list) -> None:
    kind = draw(st.sampled_from(["time", "time", "time", "type", "arg", "category", "header", "step", "keep",
                                 "duplicate_gpu", "deep", "surrogate", "whitespace", "duplicate_key", "bare"]))
    e = _event(draw, doc)
    if kind == "time" and e is not None:
        e[draw(st.sampled_from(["ts", "dur"]))] = draw(NUMBERS)
    elif kind == "type" and e is not None:
        e[draw(st.sampled_from(["ph", "cat", "name", "pid", "tid", "args"]))] = draw(ANY)
    elif kind == "arg" and e is not None:
        args = e.setdefault("args", {})
        if isinstance(args, dict):
            args[draw(ARG_KEYS)] = draw(ANY)
    elif kind == "category" and e is not None:
        e["cat"], e["ph"] = draw(CATEGORIES), draw(st.sampled_from(["X", "X", "i", "B", "f"]))
    elif kind == "header":
        key = draw(st.sampled_from(["deviceProperties", "distributedInfo"]))
        doc[key] = draw(st.one_of(ANY, st.builds(lambda r, w: {"rank": r, "world_size": w}, ANY, ANY),
                                  st.builds(lambda i: [{"id": i, "name": "G"}], ANY)))
    elif kind == "step" and e is not None:
        e["name"] = f"ProfilerStep#{draw(st.integers(0, 10**30))}"
        e["cat"] = draw(st.sampled_from(["user_annotation", "cpu_op"]))
    elif kind == "keep":
        cat = draw(CATEGORIES)
        doc["traceEvents"] = [x for x in doc["traceEvents"] if isinstance(x, dict) and x.get("cat") == cat]
    elif kind == "duplicate_gpu" and isinstance(doc.get("deviceProperties"), list) and doc["deviceProperties"]:
        doc["deviceProperties"].append(copy.deepcopy(doc["deviceProperties"][0]))
    elif kind == "deep" and e is not None:
        depth = draw(st.sampled_from([5, 150, 900, 5000]))
        if isinstance(e.setdefault("args", {}), dict):
            e["args"]["deep"] = "@@DEEP@@"
            texts.append(("@@DEEP@@", "[" * depth + "]" * depth))
    elif kind == "surrogate" and e is not None:
        e["name"] = "@@SURROGATE@@"
        texts.append(("@@SURROGATE@@", draw(st.sampled_from(["a\\ud800b", "\\udc00", "\\ud83d\\ude00"]))))
    elif kind == "whitespace":
        texts.append(("^", draw(st.sampled_from([" " * 5000, "\n" * 70000, "\ufeff", "\ufeff" + " " * 10]))))
    elif kind == "duplicate_key":
        texts.append(('"dur": ', '"dur": -5, "dur": '))
    elif kind == "bare":
        texts.append(("bare", ""))


def _container(draw, data: bytes) -> bytes:
    how = draw(st.sampled_from(["plain", "plain", "gzip", "gzip_cut", "gzip_members", "gzip_padding",
                                "gzip_garbage", "gzip_trailer"]))
    if how == "plain":
        return data
    packed = gzip.compress(data, compresslevel=1)
    if how == "gzip_cut":
        return packed[:draw(st.integers(0, len(packed) - 1))]
    if how == "gzip_members":
        cut = draw(st.integers(0, len(data)))
        return gzip.compress(data[:cut], compresslevel=1) + gzip.compress(data[cut:], compresslevel=1)
    if how == "gzip_padding":
        return packed + b"\0" * draw(st.integers(1, 64))
    if how == "gzip_garbage":
        return packed + draw(st.binary(min_size=1, max_size=16))
    if how == "gzip_trailer":
        return packed[:-4] + draw(st.binary(min_size=4, max_size=4))
    return packed


@st.composite
def kineto_structured(draw) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(fz.available("kineto", fz.KINETO_SEEDS)))
    doc = copy.deepcopy(fz.kineto_seed(seed))
    texts: list = []
    for _ in range(draw(st.integers(1, 3))):
        _mutate_kineto(draw, doc, texts)
    bare = ("bare", "") in texts
    text = json.dumps(doc["traceEvents"] if bare else doc)
    for old, new in texts:
        if old == "^":
            text = new + text
        elif old == "@@DEEP@@":
            text = text.replace('"@@DEEP@@"', new, 1)
        elif old != "bare":
            text = text.replace(old, new, 1)
    return seed, Case(_container(draw, text.encode("utf-8", "surrogatepass")))


@st.composite
def kineto_bytes(draw) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(fz.available("kineto", fz.KINETO_SEEDS)))
    data = bytearray(json.dumps(fz.kineto_seed(seed)).encode())
    for _ in range(draw(st.integers(1, 4))):
        _mutate_bytes(draw, data)
    return seed, Case(_container(draw, bytes(data)))


def _mutate_bytes(draw, data: bytearray) -> None:
    if not data:
        return
    at = draw(st.integers(0, len(data) - 1))
    kind = draw(st.sampled_from(["flip", "flip", "delete", "insert", "duplicate", "truncate", "digit"]))
    if kind == "flip":
        data[at] ^= draw(st.integers(1, 255))
    elif kind == "delete":
        del data[at:at + draw(st.integers(1, 64))]
    elif kind == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "duplicate":
        data[at:at] = data[at:at + draw(st.integers(1, 256))]
    elif kind == "truncate":
        del data[at:]
    elif kind == "digit":  # a number's digit changed, or a minus sign put in front of one
        digits = [i for i in range(at, min(len(data), at + 4096)) if 0x30 <= data[i] <= 0x39]
        if digits:
            i = digits[0]
            data[i:i + 1] = draw(st.sampled_from([b"-", b"9", b"0", b"99999999999999999999"])) + data[i:i + 1]


def _run(tmp_root: Path, name: str, data: bytes, expect_of, where: str) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_root))
    try:
        trace = folder / name
        trace.write_bytes(data)
        expect = expect_of(trace, data)
        out = folder / "out.sqlite"
        fz.check(expect, trace, out, fz.run_import(trace, out), where)
        assert {p.name for p in folder.iterdir()} <= {name, "out.sqlite"}, "left files behind"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@examples(110)
@given(case=kineto_structured())
def test_kineto_structured_mutations(tmp_path_factory, case):
    seed, data = case
    _run(tmp_path_factory.getbasetemp(), "trace.json", data, lambda p, d: fz.kineto_expectation(d), seed)


@examples(60)
@given(case=kineto_bytes())
def test_kineto_byte_mutations(tmp_path_factory, case):
    seed, data = case
    _run(tmp_path_factory.getbasetemp(), "trace.json", data, lambda p, d: fz.kineto_expectation(d), seed)


# ------------------------------------------------------------------------------------------ nsys SQLite

TIME_EDITS = ['"end" = start', '"end" = start - 1', '"end" = start - 1000000000', 'start = NULL', '"end" = NULL',
              "\"end\" = 'abc'", "start = 1.5", "\"end\" = X'00ff'", 'start = -9223372036854775808',
              '"end" = 9223372036854775807', 'start = "end" + 5']
ID_EDITS = ["deviceId = 4611686018427387904", "deviceId = -5", "deviceId = 'x'", "streamId = -1",
            "globalPid = -1", "globalPid = 9223372036854775807", "correlationId = NULL", "correlationId = 'c'"]
NVTX_TEXTS = ["{" * 5000, "{'mod': 5, 'op': []}", "{'mod': 'T', 'op': 'mm', 'args': [{'shape': 'x'}]}",
              "aten::mm, seq = 99999999999999999999999, sizes = [[", "ProfilerStep#123456789012345678901234567",
              "aten::add, sizes = [" + "[" * 3000 + "]" * 3000 + "]"]


def _sql(conn: sqlite3.Connection, statement: str) -> None:
    try:
        conn.executescript(statement)
    except sqlite3.Error:
        pass  # a mutation that does not apply to this export (no such table or column)


@st.composite
def nsys_case(draw) -> tuple[str, list, list]:
    seed = draw(st.sampled_from(fz.available("nsys_sqlite", fz.NSYS_SEEDS)))
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        table = draw(st.sampled_from(list(fz.NSYS_TABLES)))
        every, which = draw(st.sampled_from([1, 1, 2, 7, 1000])), draw(st.integers(0, 6))
        where = f"WHERE rowid % {every} = {which % every}"
        kind = draw(st.sampled_from(["time", "time", "time", "ids", "drop_column", "enum_text", "strings",
                                     "gpu_twice", "empty", "nvtx_text", "event_type"]))
        if kind == "time":
            edits.append(f'UPDATE "{table}" SET {draw(st.sampled_from(TIME_EDITS))} {where}')
        elif kind == "ids":
            edits.append(f'UPDATE "{table}" SET {draw(st.sampled_from(ID_EDITS))} {where}')
        elif kind == "drop_column":
            edits.append(f'ALTER TABLE "{table}" DROP COLUMN {draw(st.sampled_from(["start", "end", "deviceId"]))}')
        elif kind == "enum_text":
            enum = draw(st.sampled_from(["ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_NSYS_EVENT_CLASS"]))
            edits.append(f"CREATE TABLE e2 (id TEXT, name TEXT, label TEXT); INSERT INTO e2 SELECT 'x' || id, name, "
                         f'label FROM "{enum}"; DROP TABLE "{enum}"; ALTER TABLE e2 RENAME TO "{enum}"')
        elif kind == "strings":
            edits.append(f"UPDATE StringIds SET value = CAST(X'C328FF' || CAST(value AS BLOB) AS TEXT) {where}")
        elif kind == "gpu_twice":
            edits.append("INSERT INTO TARGET_INFO_GPU SELECT * FROM TARGET_INFO_GPU LIMIT 1")
        elif kind == "empty":
            edits.append("; ".join(f'DELETE FROM "{t}"' for t in fz.NSYS_TABLES))
        elif kind == "nvtx_text":
            text = draw(st.sampled_from(NVTX_TEXTS)).replace("'", "''")
            edits.append(f"UPDATE NVTX_EVENTS SET text = '{text}' {where}")
        elif kind == "event_type":
            edits.append(f"UPDATE NVTX_EVENTS SET eventType = {draw(st.sampled_from(['NULL', 59, 60, 34, '''x''']))} "
                         f"{where}")
    flips = []
    if draw(st.integers(0, 4)) == 0:
        size = seed_size(seed)
        flips = [(draw(st.integers(100, size - 1)), draw(st.integers(1, 255)))
                 for _ in range(draw(st.integers(1, 4)))]
    return seed, edits, flips


def seed_size(seed: str) -> int:
    return fz.seed_path("nsys_sqlite", seed).stat().st_size


@examples(45)
@given(case=nsys_case())
def test_nsys_mutations(tmp_path_factory, case):
    seed, edits, flips = case
    folder = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    try:
        trace = folder / "export.sqlite"
        shutil.copyfile(fz.seed_path("nsys_sqlite", seed), trace)
        conn = sqlite3.connect(trace)
        for statement in edits:
            _sql(conn, statement)
        conn.commit()
        conn.close()
        if flips:
            data = bytearray(trace.read_bytes())
            for at, mask in flips:
                data[at % len(data)] ^= mask
            trace.write_bytes(bytes(data))
        expect = fz.nsys_expectation(trace)
        out = folder / "out.sqlite"
        fz.check(expect, trace, out, fz.run_import(trace, out), f"{seed} {edits} {flips}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------------------------------ nsys stats CSV

CELLS = st.sampled_from(["-5", "abc", "", " 12 ", "1_000", "9223372036854775808", "-9223372036854775808", "1.5",
                         "\u0663", "=cmd|' /C calc'!A0", "0", "99999999999999"])


@st.composite
def stats_case(draw) -> bytes:
    rows = list(csv.reader(io.StringIO(fz.stats_seed())))
    header = rows[0]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cell", "cell", "swap", "drop_column", "long_row", "short_row", "blank_line"]))
        r = draw(st.integers(1, len(rows) - 1))
        if kind == "cell":
            name = draw(st.sampled_from(["Start (ns)", "End (ns)", "PID", "TID", "Name", "Duration (ns)"]))
            column = header.index(name) if name in header else len(header)
            if column < len(rows[r]):
                rows[r][column] = draw(CELLS)
        elif kind == "swap" and len(rows[r]) > 1:
            rows[r][0], rows[r][1] = rows[r][1], rows[r][0]
        elif kind == "drop_column":
            column = draw(st.integers(0, len(header) - 1))
            rows = [row[:column] + row[column + 1:] for row in rows]
            header = rows[0]
        elif kind == "long_row":
            rows[r] = rows[r] + ["extra"]
        elif kind == "short_row":
            rows[r] = rows[r][:draw(st.integers(0, len(rows[r])))]
        elif kind == "blank_line":
            rows.insert(r, [])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    data = bytearray(buffer.getvalue().encode())
    if draw(st.integers(0, 4)) == 0:
        _mutate_bytes(draw, data)
    data = bytes(data)
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    how = draw(st.sampled_from(["plain", "xz", "gzip", "bz2", "xz_cut"]))
    if how == "xz":
        return Case(lzma.compress(data))
    if how == "gzip":
        return Case(gzip.compress(data))
    if how == "bz2":
        return Case(bz2.compress(data))
    if how == "xz_cut":
        packed = lzma.compress(data)
        return Case(packed[:draw(st.integers(6, len(packed) - 1))])
    return Case(data)


@examples(45)
@given(data=stats_case())
def test_nsys_stats_csv_mutations(tmp_path_factory, data):
    _run(tmp_path_factory.getbasetemp(), "nvtx_pushpop_trace.csv", data, lambda p, d: fz.stats_expectation(d),
         "stats csv")


# ------------------------------------------------------------------------------------------ ncu CSV

@st.composite
def ncu_case(draw) -> tuple[str, bytes]:
    seed = draw(st.sampled_from(fz.available("ncu_csv", fz.NCU_SEEDS)))
    lines = fz.seed_path("ncu_csv", seed).read_text().splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["value", "value", "drop_line", "bytes"]))
        if kind == "value" and lines[i].count('"') >= 2:
            cells = lines[i].rstrip("\n").split('","')
            cells[-1] = draw(st.sampled_from(["-5", "1e400", "nan", "", "abc", "-1,000", "1e308"])) + '"'
            lines[i] = '","'.join(cells) + "\n"
        elif kind == "drop_line":
            del lines[i]
        elif kind == "bytes":
            data = bytearray(lines[i].encode())
            _mutate_bytes(draw, data)
            lines[i] = data.decode("utf-8", "replace")
    return seed, Case("".join(lines).encode())


@examples(30)
@given(case=ncu_case())
def test_ncu_csv_mutations(tmp_path_factory, case):
    """Counters alone make a counters-only database; the oracle only says what must never be: a negative
    time, FLOP or byte count stored, or anything but exit 0 / exit 2 with one line."""
    seed, data = case
    folder = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    try:
        trace = folder / "counters.csv"
        trace.write_bytes(data)
        out = folder / "out.sqlite"
        outcome = fz.run_import(trace, out)
        if outcome.code != 0:
            fz.check(fz.either("counters"), trace, out, outcome, seed)
        else:
            event("counters imported, exit 0")
            assert outcome.stderr == [f"wrote {out}"] and not outcome.warnings, outcome
            conn = sqlite3.connect(out)
            try:
                assert conn.execute("SELECT COUNT(*) FROM ncu_kernels").fetchone()[0] > 0
                negative = conn.execute(
                    "SELECT COUNT(*) FROM ncu_kernels WHERE time_ns < 0 OR flops_fp64 < 0 OR flops_fp32 < 0 OR "
                    "flops_fp16 < 0 OR flops_tensor < 0 OR bytes_dram < 0 OR bytes_l2 < 0 OR bytes_l1 < 0"
                ).fetchone()[0]
            finally:
                conn.close()
            assert negative == 0, f"negative counters stored ({seed})"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
