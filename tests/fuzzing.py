"""The fuzzing harness's parts: seeds taken from real profiles at test time, mutations, the oracles that say
what a correct import of a mutated file must give, and the checks of what ``dlscope import`` did.

The contract under test (issue 15, README): an import exits 0 with a valid database (no event ends before it
starts, no negative wall clock or iteration, the tables hold exactly the valid events of the file and the
summary counts exactly the dropped ones), or exits 2 with one line naming the input. Never an internal error,
a traceback, a warning, or a silent crash.

The oracles read the mutated bytes with the standard library only (``json`` with exact ``Decimal`` numbers,
``sqlite3``, ``csv``) and restate the importers' documented rules; they share no code with dlscope. Each
returns a verdict: "accept" (with the expected rows and drops), "reject", or "either" where both outcomes
meet the contract and the oracle does not model which one the importer takes (a lone UTF-16 surrogate, which
one JSON reader refuses and another replaces; a damaged SQLite page; nesting near the recursion limit).
Real files are read, never copied into the repository: the corpus is generated at test time.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import decimal
import gzip
import io
import json
import lzma
import re
import sqlite3
import warnings
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from conftest import DATA

INT64_MAX = 2**63 - 1
MAX_RANKS = 2**20  # README: ranks and world sizes a trace may say (importers refuse others)
EXACT = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_EVEN, traps=[decimal.InvalidOperation])


@dataclass
class Expect:
    """What a correct import gives: the verdict, the rows of each table (for "accept") and the dropped events
    by (table, reason); ``why`` says what decided a rejection."""

    verdict: str
    rows: dict[str, int] = field(default_factory=dict)
    dropped: dict[tuple[str, str], int] = field(default_factory=dict)
    why: str = ""


def reject(why: str) -> Expect:
    return Expect("reject", why=why)


def either(why: str) -> Expect:
    return Expect("either", why=why)


# =============================================================================================== seeds

KINETO_SEEDS = ("hta_event_sync_a100.json.gz", "hta_triton_a100.json.gz", "hta_legacy_format_inference_rank1.json.gz",
                "hta_cpu_only_no_gpu.pt.trace.json.gz", "hta_event_sync_multistream_a100.json.gz",
                "hta_alexnet_a100_critical_path.json.gz")
NSYS_SEEDS = ("dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite",
              "memfusion_tensorrt_nvtx_rtx3090x4_nsys2023.1.sqlite",
              "pipit_saxpy_mpi_nvtx_a100_nsys2022.2.sqlite", "pipit_cloverleaf_a100x4_nsys2024.5.sqlite",
              "nvfuser_h200_nvtx_nsys2025.1.sqlite")
STATS_SEED = "jaxtoolbox_pax_fsdp4_a100_4proc/proc0_nvtx_pushpop_trace.csv.xz"
NCU_SEEDS = ("wangzy_gemm_roofline_metrics_a100.csv", "wangzy_gemm_roofline_metrics_v100.csv",
             "leleucas_bert_attention_flashattn_ampere.csv")


def available(folder: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if (DATA / folder / n).exists())


@cache
def kineto_seed(name: str) -> dict:
    return json.loads(gzip.decompress((DATA / "kineto" / name).read_bytes()))


@cache
def stats_seed(lines: int = 300) -> str:
    """The header and the first ``lines`` rows of a real nvtx_pushpop_trace CSV."""
    text = lzma.decompress((DATA / "nsys_stats_csv" / STATS_SEED).read_bytes()).decode()
    return "\n".join(text.splitlines()[:lines + 1]) + "\n"


def seed_path(folder: str, name: str) -> Path:
    return DATA / folder / name


# ======================================================================================= running dlscope

#: warnings a default Python run does not print (the CLI's users would not see them)
_SILENT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@dataclass
class Outcome:
    code: int
    stderr: list[str]
    warnings: list[str]


def run_import(trace: Path, out: Path) -> Outcome:
    """``dlscope import TRACE -o OUT -q`` in this process (the CLI's own entry point), with what it printed
    on stderr and the warnings a user would have seen."""
    from dlscope.cli import main

    err = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        code = main(["import", str(trace), "-o", str(out), "-q"])
    shown = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, _SILENT)]
    return Outcome(code, err.getvalue().splitlines(), shown)


def check(expect: Expect, trace: Path, out: Path, outcome: Outcome, where: str = "") -> None:
    """The contract: exit 0 with a valid database that matches the oracle, or exit 2 with one line naming
    the input; never anything else."""
    said = f"{where} ({expect.verdict}: {expect.why}) -> exit {outcome.code}: {outcome.stderr}"
    from hypothesis import event

    event(f"oracle {expect.verdict}, exit {outcome.code}")  # the mix of outcomes, in --hypothesis-show-statistics
    assert not outcome.warnings, f"printed warnings {outcome.warnings}; {said}"
    assert outcome.code in (0, 2), said
    if outcome.code == 2:
        assert expect.verdict != "accept", f"refused a file the oracle accepts; {said}"
        assert len(outcome.stderr) == 1 and outcome.stderr[0].startswith("dlscope: error: "), said
        assert str(trace) in outcome.stderr[0], f"the message does not name the input; {said}"
        assert not out.exists(), said
        return
    assert expect.verdict != "reject", f"imported a file the oracle rejects; {said}"
    assert outcome.stderr == [f"wrote {out}"], said
    check_database(out, expect, said)


TIMED = {"kernels": "kernels", "op_instances": "ops", "api_calls": "api_calls", "memops": "memops",
         "syncs": "syncs", "ranges": "ranges"}


def check_database(db: Path, expect: Expect, said: str) -> None:
    from dlscope.present.summary import summary_dict

    conn = sqlite3.connect(db)
    try:
        for table in TIMED:
            bad = conn.execute(f'SELECT COUNT(*) FROM {table} WHERE "end" < start').fetchone()[0]
            assert bad == 0, f"{bad} rows of {table} end before they start; {said}"
        assert conn.execute('SELECT COUNT(*) FROM iterations WHERE "end" < start OR cpu_end < start').fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM aggregations WHERE wall_clock_ns < 0").fetchone()[0] == 0, said
        assert conn.execute("SELECT COUNT(*) FROM agg_iterations WHERE duration_ns < 0").fetchone()[0] == 0, said
        rows = {name: conn.execute(f"SELECT COUNT(*) FROM {name}").fetchone()[0]
                for name in ("kernels", "api_calls", "memops", "syncs", "ranges")}
        # an nsys export's NVTX ranges are ops (emit_nvtx, DLProf, or ranges that launched work) or ranges
        rows["nvtx"] = rows["ranges"] + conn.execute("SELECT COUNT(*) FROM op_instances").fetchone()[0]
    finally:
        conn.close()
    if expect.verdict == "accept":
        for name, n in expect.rows.items():
            assert rows[name] == n, f"{name}: {rows[name]} rows, the file holds {n} valid ones; {said}"
        found: dict[tuple[str, str], int] = {}
        for d in summary_dict(db)["profile"]["dropped_events"]:
            key = ("nvtx" if d["table"] in ("ops", "ranges") and ("nvtx", d["reason"]) in expect.dropped
                   else d["table"], d["reason"])
            found[key] = found.get(key, 0) + d["count"]
        assert found == expect.dropped, f"dropped {found}, the file has {expect.dropped} bad events; {said}"


# ============================================================================================ Kineto

KERNEL, MEMOPS = ("kernel", "Kernel"), ("gpu_memcpy", "Memcpy", "gpu_memset", "Memset")
API, SYNC = ("cuda_runtime", "Runtime", "cuda_driver"), ("cuda_sync",)
OPS, RANGES = ("cpu_op", "Operator"), ("user_annotation", "gpu_user_annotation")
TABLE_OF = {**dict.fromkeys(KERNEL, "kernels"), **dict.fromkeys(MEMOPS, "memops"), **dict.fromkeys(API, "api_calls"),
            **dict.fromkeys(SYNC, "syncs"), **dict.fromkeys(OPS, "ops"), **dict.fromkeys(RANGES, "ranges"),
            "python_function": "ranges"}
#: ``args`` keys the importer reads as integers (int, float, numeric text or null; anything else refused)
INT_ARGS = ("External id", "external id", "Sequence number", "correlation", "device", "stream", "registers per thread",
            "shared memory", "bytes", "Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved",
            "In msg nelems", "Out msg nelems", "Group size")
#: the ``args`` keys of an instant event the importer reads (its allocator samples' keys)
MEMORY_INT_ARGS = ("Device Type", "Device Id", "Bytes", "Total Allocated", "Total Reserved", "Addr")
#: the phases of the Chrome trace event format (its spec); the importer reads complete ("X") and instant ("i")
#: events only, and skips the others' keys unless an event's phase is not one of these (or it has none)
CHROME_PHASES = frozenset("B E X i I C b n e s t f P N O D M V v R c ( ) = T p S F".split())
_STEP = re.compile(r"ProfilerStep#(\d+)\Z")


class _Bad(Exception):
    """The document breaks a rule that makes the importer refuse it."""


class _Unsure(Exception):
    """The document holds something the oracle does not model (the verdict is "either")."""


def kineto_expectation(data: bytes) -> Expect:
    try:
        return _kineto(data)
    except _Bad as e:
        return reject(str(e))
    except _Unsure as e:
        return either(str(e))


def _kineto(data: bytes) -> Expect:
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
                data = g.read()
        except (OSError, EOFError, zlib_error()) as e:
            raise _Bad(f"gzip: {e}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # refused where dlscope reads the text; where it only skips it (an unknown key), msgspec does not look
        raise _Unsure("not UTF-8") from None
    if not text.strip(" \t\r\n"):
        raise _Bad("blank")
    if _depth(text) > 200:
        raise _Unsure("deep nesting (near the recursion limits of the JSON readers)")
    try:
        doc = json.loads(text, parse_float=Decimal, parse_int=int, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise _Bad(f"not JSON: {e}") from None
    if re.search(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}", text) and _has_lone_surrogate(doc):
        raise _Unsure("a lone UTF-16 surrogate (msgspec refuses it, ijson replaces it)")
    if isinstance(doc, list):
        events, header = doc, {}
    elif isinstance(doc, dict) and "traceEvents" in doc:
        events, header = doc["traceEvents"], doc
        if events is None:
            events = []
        if not isinstance(events, list):
            raise _Bad("traceEvents is not a list")
    else:
        raise _Bad("not a trace")
    # a trace smaller than a piece is decoded at once: by phase when every phase is the format's, else as a whole
    by_phase = all(isinstance(e, dict) and isinstance(e.get("ph"), str) and e["ph"] in CHROME_PHASES
                   for e in events)
    for e in events:
        _check_types(e, by_phase)
    rank, world = _identity(header)
    if not 0 <= rank < MAX_RANKS or not 1 <= world <= MAX_RANKS:
        raise _Bad(f"rank {rank} / world size {world}")
    listed = header.get("deviceProperties")
    devices = [_as_int(p.get("id", -1)) for p in (listed if isinstance(listed, list) else []) if isinstance(p, dict)]
    if len(devices) != len(set(devices)):
        raise _Bad("a GPU listed twice")
    rows = dict.fromkeys(("kernels", "api_calls", "memops", "syncs", "ops", "ranges"), 0)
    dropped: dict[tuple[str, str], int] = {}
    memory = 0
    times: list[tuple[int, int]] = []  # (start, end) of every kept event: their span must fit int64
    durations: dict[str, int] = {}
    for e in events:
        ph, cat, name = e.get("ph", ""), e.get("cat", ""), e.get("name", "")
        if ph == "i" and name == "[memory]":
            ts = _ns(e.get("ts", 0), "ts")
            if _as_int((e.get("args") or {}).get("Device Type", -1)) in (0, 1):  # CPU and CUDA samples are kept
                memory += 1
                times.append((ts, ts))
            continue
        if ph != "X" or cat not in TABLE_OF:
            continue
        if cat == "python_function" and not ("__next__" in name or "dataloader" in name.lower()):
            continue
        table = TABLE_OF[cat]
        if table == "ops" and name.startswith("ProfilerStep#"):
            table = "ranges"
        start = _ns(e.get("ts", 0), "ts")
        end = start + _ns(e.get("dur", 0), "dur")
        if not -INT64_MAX - 1 <= end <= INT64_MAX:
            raise _Bad("end past int64")
        if end < start:
            dropped[(table, "end_before_start")] = dropped.get((table, "end_before_start"), 0) + 1
        elif table == "ranges" and (m := _STEP.match(name)) and int(m.group(1)) > INT64_MAX:
            dropped[(table, "step_number_too_large")] = dropped.get((table, "step_number_too_large"), 0) + 1
        else:
            rows[table] += 1
            times.append((start, end))
            durations[table] = durations.get(table, 0) + end - start
    if not any(rows.values()) and not memory:
        raise _Bad("no events")
    if times and (max(t for _, t in times) - min(t for t, _ in times) > INT64_MAX
                  or any(total > INT64_MAX for total in durations.values())):
        raise _Bad("times further apart than int64 ns measure")
    return Expect("accept", {k: rows[k] for k in ("kernels", "api_calls", "memops", "syncs")}, dropped)


def zlib_error():
    import zlib

    return zlib.error


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(text: str) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def _check_types(e: Any, by_phase: bool) -> None:
    """The importer decodes each event into a typed struct: these types or the file is refused. ``by_phase``:
    only complete events are typed in full, instant events by the keys of an allocator sample, and the keys of
    every other phase are skipped."""
    if not isinstance(e, dict):
        raise _Bad("an event that is not an object")
    if by_phase and e["ph"] not in ("X", "i"):
        return
    instant = by_phase and e["ph"] == "i"
    for key in ("name",) if instant else ("ph", "cat", "name"):
        if key in e and not isinstance(e[key], str):
            raise _Bad(f"{key} is not a string")
    for key in ("pid", "tid"):
        if key in e:
            _int_typed(e[key], key)
    if "args" in e:
        if not isinstance(e["args"], dict):
            raise _Bad("args is not an object")
        for key in MEMORY_INT_ARGS if instant else INT_ARGS:
            if key in e["args"]:
                _int_typed(e["args"][key], key)


def _int_typed(value: Any, key: str) -> None:
    """int | float | str | null: a bool, list or object is refused, and so is a float past float64."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str, type(None))):
        raise _Bad(f"{key} of type {type(value).__name__}")
    if isinstance(value, Decimal) and abs(float(value)) == float("inf"):
        raise _Bad(f"{key} out of float64 range")


def _as_int(value: Any) -> int:
    """The importers' lenient integer (README): ints, floats and numeric text; -1 for anything else or a
    value past int64."""
    if isinstance(value, bool):
        out = int(value)
    elif isinstance(value, int):
        out = value
    else:
        text = str(value) if isinstance(value, (Decimal, str)) else None
        if text is None:
            return -1
        try:
            out = int(text)
        except ValueError:
            try:
                out = int(float(text))
            except (ValueError, OverflowError):
                return -1
    return out if -(2**63) <= out < 2**63 else -1


def _identity(header: dict) -> tuple[int, int]:
    info = header.get("distributedInfo")
    if not isinstance(info, dict):
        return 0, 1
    return max(_as_int(info.get("rank", 0)), 0), max(_as_int(info.get("world_size", 1)), 1)


def _ns(value: Any, what: str) -> int:
    """µs as JSON writes them to exact int64 ns (schema.md: ties to even past 3 decimals), or refused."""
    if isinstance(value, bool) or not isinstance(value, (int, Decimal, str)):
        raise _Bad(f"{what} is not a number")
    try:
        us = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)
    except decimal.InvalidOperation:
        raise _Bad(f"{what} {value!r} is not a number") from None
    if not us.is_finite() or (us and us.adjusted() > 17):
        raise _Bad(f"{what} out of range")
    ns = int(EXACT.multiply(us.quantize(Decimal("0.001"), context=EXACT), 1000))
    if not -INT64_MAX - 1 <= ns <= INT64_MAX:
        raise _Bad(f"{what} out of range")
    return ns


# ========================================================================================== nsys SQLite

NSYS_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": "kernels", "CUPTI_ACTIVITY_KIND_RUNTIME": "api_calls",
               "CUPTI_ACTIVITY_KIND_DRIVER": "api_calls", "CUPTI_ACTIVITY_KIND_MEMCPY": "memops",
               "CUPTI_ACTIVITY_KIND_MEMSET": "memops", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "syncs",
               "NVTX_EVENTS": "nvtx"}
_TIMED = "typeof(start) = 'integer' AND typeof(\"end\") = 'integer'"


def nsys_expectation(path: Path) -> Expect:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return _nsys(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        if "file is not a database" in str(e) or "malformed" in str(e) or "disk image" in str(e):
            return either(f"damaged SQLite: {e}")
        raise


def _nsys(conn: sqlite3.Connection) -> Expect:
    conn.text_factory = bytes
    integrity = conn.execute("PRAGMA integrity_check").fetchall()
    if integrity != [(b"ok",)]:
        return either("a damaged SQLite file (integrity_check fails)")
    tables = {r[0].decode() for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not ("NVTX_EVENTS" in tables or any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)):
        return reject("not an nsys export")
    rows = dict.fromkeys(("kernels", "api_calls", "memops", "syncs", "nvtx"), 0)
    dropped: dict[tuple[str, str], int] = {}
    spans: list[tuple[int, int]] = []
    totals: dict[str, float] = {}

    def drop(table: str, reason: str, n: int) -> None:
        if n:
            dropped[(table, reason)] = dropped.get((table, reason), 0) + n

    for name, table in NSYS_TABLES.items():
        if name not in tables:
            continue
        columns = {r[1].decode() for r in conn.execute(f'PRAGMA table_info("{name}")')}
        has_rows = conn.execute(f'SELECT 1 FROM "{name}" LIMIT 1').fetchone() is not None
        if not {"start", "end"} <= columns:
            if has_rows:
                return reject(f"{name} without start/end")
            continue
        kind = "eventType IN (59, 60)" if table == "nvtx" else "1"
        if table == "nvtx" and "eventType" not in columns:
            kind = "0"
        keep = kind
        if table == "api_calls" and "eventClass" in columns:
            keep += " AND CAST(COALESCE(eventClass, -1) AS INTEGER) NOT IN (67, 68, 69)"
        def one(sql: str, name: str = name) -> int:
            return conn.execute(f'SELECT COUNT(*) FROM "{name}" WHERE {sql}').fetchone()[0]

        drop("ranges" if table == "nvtx" else table, "no_integer_time", one(f"NOT ({_TIMED}) AND {kind}"))
        valid = f'{_TIMED} AND {keep} AND "end" {">" if table == "nvtx" else ">="} start'
        rows[table] += one(valid)
        if table == "nvtx":  # a ProfilerStep# number past int64 is dropped and counted, as in any format
            huge = _huge_nvtx_steps(conn, columns, tables, valid)
            rows[table] -= huge
            drop("ranges", "step_number_too_large", huge)
        drop(table, "end_before_start", one(f'{_TIMED} AND {keep} AND "end" < start'))
        first, last, total = conn.execute(f'SELECT MIN(start), MAX("end"), SUM(CAST("end" AS REAL) - start) '
                                          f'FROM "{name}" WHERE {valid}').fetchone()
        if first is not None:
            spans.append((first, last))
            totals[table] = totals.get(table, 0.0) + total
    if not any(rows.values()):
        return reject("no events")
    if spans and max(e for _, e in spans) - min(s for s, _ in spans) > INT64_MAX:
        return reject("times further apart than int64 ns measure")
    if any(t > INT64_MAX for t in totals.values()):
        return either("durations adding up to about int64's largest value (the importer adds per model table)")
    for table, column in (("TARGET_INFO_GPU", "id"), ("TARGET_INFO_GPU", "cuDevice"),
                          ("TARGET_INFO_CUDA_DEVICE", "cudaId")):
        if table in tables and column in {r[1].decode() for r in conn.execute(f'PRAGMA table_info("{table}")')} \
                and conn.execute(f'SELECT COUNT(*) - COUNT(DISTINCT "{column}") FROM "{table}"').fetchone()[0]:
            return either("GPUs listed twice (whether they collide after nsys's id mapping is not modelled)")
    return Expect("accept", rows, dropped)


def _huge_nvtx_steps(conn: sqlite3.Connection, columns: set[str], tables: set[str], valid: str) -> int:
    """Valid NVTX ranges whose text (inline, else through StringIds) is ProfilerStep#N with N past int64."""
    text = '"text"' if "text" in columns else "NULL"
    if "textId" in columns and "StringIds" in tables:
        text = f'COALESCE({text}, (SELECT s.value FROM StringIds s WHERE s.id = NVTX_EVENTS.textId))'
    names = conn.execute(f'SELECT {text} FROM NVTX_EVENTS WHERE {valid}').fetchall()
    count = 0
    for (name,) in names:
        name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name or "")
        m = _STEP.match(name)
        count += bool(m and int(m.group(1)) > INT64_MAX)
    return count


# ============================================================================== nsys stats CSV

STATS_REQUIRED = ("Start (ns)", "End (ns)", "Name", "PID", "TID")


def stats_expectation(data: bytes) -> Expect:
    for magic, opener in ((b"\xfd7zXZ\x00", lzma.decompress), (b"\x1f\x8b", gzip.decompress), (b"BZh", bz2.decompress)):
        if data.startswith(magic):
            try:
                data = opener(data)
            except (OSError, EOFError, lzma.LZMAError, ValueError) as e:
                return reject(f"compression: {e}")
            break
    if data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        return either("looks like JSON to the format sniff")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return either("not UTF-8 (pandas decodes only the columns it reads)")
    if "\0" in text or text.count('"') % 2:
        return either("a NUL byte or an unbalanced quote (CSV readers differ)")
    lines = list(csv.reader(io.StringIO(text, newline="")))
    if not lines or not {*STATS_REQUIRED, "Duration (ns)"} <= {c.strip().strip('"') for c in lines[0]}:
        return either("no nvtx_pushpop_trace header (refused, unless another format's sniff matches)")
    header = lines[0]
    if len(set(header)) != len(header) or any(c != c.strip() for c in header):
        return either("a header pandas reads differently (repeated or padded column names)")
    at = {c: header.index(c) for c in STATS_REQUIRED}
    rows, bad, first, last, total = 0, 0, None, None, 0
    for line in lines[1:]:
        if not line or line == [""]:
            continue  # a blank line
        if len(line) > len(header):
            return either("a row with more fields than the header (pandas refuses it, or reads an index)")
        if any(_stats_int(line[at[c]] if at[c] < len(line) else "") is None
               for c in ("Start (ns)", "End (ns)", "PID", "TID")):
            return reject("a time or id that is not an int64 integer")
        start, end = _stats_int(line[at["Start (ns)"]]), _stats_int(line[at["End (ns)"]])
        if end < start:
            bad += 1
        else:
            rows += 1
            first, last = min(start, first if first is not None else start), max(end, last if last is not None else end)
            total += end - start
    if not rows:
        return reject("no events")
    if last - first > INT64_MAX or total > INT64_MAX:
        return reject("times further apart, or longer in total, than int64 ns measure")
    return Expect("accept", {"ranges": rows}, {("ranges", "end_before_start"): bad} if bad else {})


def _stats_int(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if -(2**63) <= value < 2**63 else None
