"""Nsight Compute CSV import: per-kernel FLOPs per precision, bytes per memory level and time.

Reads both CSV layouts ``ncu --csv`` writes:

* long (details page, the default): one row per kernel × metric, columns ``ID``, ``Kernel Name``,
  ``Metric Name``, ``Metric Unit``, ``Metric Value``; rule rows have more fields than metric rows;
* wide (``--page raw``): one row per kernel, one column per metric, and a units row under the header.

Application output and ``==PROF==`` lines may precede the header. Values carry thousands separators
("12,345") and auto-scaled units ("Kbyte", "cycle/nsecond"); both are undone before any arithmetic. Which
metrics make which column is data (``data/ncu_metrics.json``), following NERSC's hierarchical-roofline
recipe (seed 004).
"""

from __future__ import annotations

import io
import json
import math
import re
import sqlite3
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dlscope.analyze.tensor_core import classify_names, kernel_uses_tc
from dlscope.errors import InputError
from dlscope.store.schema import COUNTERS_DDL as NCU_DDL

#: Columns of the per-kernel frame, in order (also the ncu_kernels table).
NCU_COLUMNS = ("kernel_id", "process_id", "kernel_name", "device", "device_name", "cc", "time_ns",
               "time_source", "flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor", "flops_fma", "bytes_l1",
               "bytes_l2", "bytes_dram", "tensor_pipe_inst", "cycles", "cycles_per_second", "mma_inst",
               "total_inst", "tensor_share", "uses_tc", "uses_tc_source", "tensor_flops_basis",
               "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "nvtx_ranges")
#: The launch geometry columns (ncu "Grid Size" / "Block Size", the trace's kernels.grid_x ... block_z).
GEOMETRY = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


_IDENTITY = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
             "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name",
             "Metric Unit", "Metric Value", "Rule Name", "Rule Type", "Rule Description", "Demangled Name",
             "Mangled Name", "Function Name", "Estimated Speedup", "Estimated Speedup Type"}
_HEADER = re.compile(r'^"?ID"?,')
#: ``ncu --nvtx`` adds one column per NVTX range kind: "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:
#: Color:Msg_Type:Msg" and "Id:Domain:Start/Stop_Range:...". A cell is the thread (or range id) followed by one
#: double-quoted "domain:name:payload type:payload:color type:color:message type:message" per open range,
#: outermost first.
_NVTX_COLUMN = re.compile(r"Push/Pop_Range|Start/Stop_Range")
_NVTX_RANGE = re.compile(r'"([^"]*)"')
#: The six attributes after a range's name in an ncu NVTX cell.
_NVTX_ATTRIBUTES = 6
_LOG_PREFIX = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")


@lru_cache(maxsize=1)
def _recipes() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("ncu_metrics.json").read_text())


@lru_cache(maxsize=1)
def _tc_rule() -> dict:
    return json.loads(resources.files("dlscope.data").joinpath("ncu_tensor_core.json").read_text())


def sniff_ncu_csv(head_bytes: bytes) -> bool:
    """True when the first bytes of a file look like an ``ncu --csv`` export (long or raw page)."""
    text = head_bytes.decode("utf-8", errors="replace")
    for line in text.splitlines():
        if _HEADER.match(line):
            return '"Kernel Name"' in line and ('"Metric Name"' in line or "__" in line)
    return False


def _unit_scale(unit: str) -> float:
    """Multiplier from a Metric Unit to base units (bytes, cycles, instructions, seconds, per second)."""
    unit = (unit or "").strip()
    if not unit or unit == "%":
        return 1.0
    table = _recipes()["units"]
    if "/" in unit:
        num, den = unit.split("/", 1)
        den_scale = table["seconds"].get(den.strip(), None) or _unit_scale(den)
        return _unit_scale(num) / den_scale
    if unit in table["seconds"]:
        return table["seconds"][unit]
    if unit.lower() in table["hertz"]:
        return table["hertz"][unit.lower()]
    prefix = unit[0] if unit[0] in table["prefixes"] and unit[1:2].islower() else ""
    return table["prefixes"][prefix]


def _numbers(values: pd.Series) -> pd.Series:
    """'12,345.6' -> 12345.6; 'n/a', text, and what no counter can be (negative, infinite) -> NaN, i.e.
    not measured: the one check of the counters' values, where they enter."""
    text = values.astype("string").str.replace(",", "", regex=False).str.strip()
    numbers = pd.to_numeric(text, errors="coerce").astype("float64")
    return numbers.where(np.isfinite(numbers) & (numbers >= 0))


def _read_table(path: Path) -> pd.DataFrame:
    try:
        from dlscope.importers.streams import source

        text = source(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if start is None:
        raise InputError(path, 'not an Nsight Compute CSV (no "ID","Kernel Name",... header; '
                               "export with ncu --csv or ncu --import R.ncu-rep --csv --page raw)")
    body = "\n".join(line for line in lines[start:] if not line.startswith(_LOG_PREFIX))
    try:
        frame = pd.read_csv(io.StringIO(body), dtype=str, keep_default_na=False, engine="c",
                            on_bad_lines="skip")
    except (pd.errors.ParserError, ValueError) as exc:
        raise InputError(path, f"unreadable ncu CSV: {exc}") from exc
    if "Kernel Name" not in frame.columns:
        raise InputError(path, 'ncu CSV without a "Kernel Name" column')
    return frame


def _long_to_metrics(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Long layout -> (identity per kernel, numeric metrics per kernel), both indexed by ID."""
    rows = frame[frame["Metric Name"].astype(str).str.len() > 0]
    scale = rows["Metric Unit"].map(_unit_scale) if "Metric Unit" in rows else 1.0
    values = _numbers(rows["Metric Value"]) * scale
    numeric = (pd.DataFrame({"ID": rows["ID"], "metric": rows["Metric Name"], "value": values})
               .pivot_table(index="ID", columns="metric", values="value", aggfunc="first"))
    texts = (pd.DataFrame({"ID": rows["ID"], "metric": rows["Metric Name"], "value": rows["Metric Value"]})
             .drop_duplicates(["ID", "metric"]).pivot(index="ID", columns="metric", values="value"))
    identity = frame.drop_duplicates("ID").set_index("ID")
    name_metric = _recipes()["device_name_metric"]
    if name_metric in texts.columns:
        identity = identity.join(texts[[name_metric]])
    return identity, numeric


def _wide_to_metrics(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Raw-page layout: a units row (empty ID) under the header, then one row per kernel."""
    units: dict[str, str] = {}
    if len(frame) and frame["ID"].iloc[0].strip() == "":
        units = frame.iloc[0].to_dict()
        frame = frame.iloc[1:]
    frame = frame[frame["ID"].str.strip() != ""].drop_duplicates("ID").set_index("ID")
    metric_cols = [c for c in frame.columns if c not in _IDENTITY and "__" in c]
    numeric = pd.DataFrame({c: _numbers(frame[c]) * _unit_scale(units.get(c, "")) for c in metric_cols},
                           index=frame.index)
    return frame, numeric


def _combine(numeric: pd.DataFrame, column: str) -> pd.Series:
    """First recipe alternative whose metrics all exist, summed with weights; NaN where none does."""
    for alternative in _recipes()["columns"][column]:
        names = [name for name, _ in alternative]
        if all(name in numeric.columns for name in names):
            total = sum(numeric[name] * weight for name, weight in alternative)
            return total.astype("float64")
    return pd.Series(np.nan, index=numeric.index, dtype="float64")


def _compute_capability(identity: pd.DataFrame, numeric: pd.DataFrame) -> pd.Series:
    if "CC" in identity.columns:
        return identity["CC"].astype(str).str.strip()
    major, minor = _recipes()["cc_metrics"]
    if major in numeric.columns and minor in numeric.columns:
        return (numeric[major].astype("Int64").astype(str) + "." + numeric[minor].astype("Int64").astype(str))
    return pd.Series("", index=identity.index)


@lru_cache(maxsize=1)
def _inst_flops() -> dict:
    table = json.loads(resources.files("dlscope.data").joinpath("tensor_inst_flops.json").read_text())
    table["compiled"] = [(re.compile(r["pattern"]), r["shape"]) for r in table["name_shapes"]]
    return table


@lru_cache(maxsize=65536)
def instruction_shape(kernel_name: str) -> str:
    """The MMA shape ('m16n8k16') a kernel's name says its Tensor Core instructions have; '' when it does
    not say (data/tensor_inst_flops.json, name_shapes)."""
    for pattern, shape in _inst_flops()["compiled"]:
        found = pattern.search(kernel_name or "")
        if found:
            return shape.format(*found.groups())
    return ""


def flops_per_tensor_instruction(kernel_name: str, cc: str) -> tuple[float, str]:
    """(FLOPs per tensor-pipe instruction, why) for a kernel on an architecture; (nan, why) when unknown.

    The name's instruction shape when the architecture has it, else the architecture's default shape."""
    arch = _inst_flops()["architectures"].get(str(cc or "").strip())
    if arch is None:
        return math.nan, f"no instruction table for CC {cc or '?'}"
    shape = instruction_shape(kernel_name)
    per = arch["flops_per_instruction"]
    if shape in per:
        return float(per[shape]), f"{shape} from the name x {per[shape]} (CC {cc})"
    if arch["default"] in per:
        return float(per[arch["default"]]), f"{arch['default']} default of CC {cc} x {per[arch['default']]}"
    return math.nan, f"no fixed FLOPs per instruction on CC {cc} ({arch['name']}) without a shape in the name"


def tensor_ops_columns(columns: list[str], prefix: str) -> list[str]:
    """The tensor-ops counters to add up without counting an op twice: ncu offers totals per source type
    (``…src_fp16``) and their parts (per instruction family ``…op_hgmma_src_fp16``, per destination ``…_dst_fp32``,
    per sparsity ``…_sparsity_off``); a part is left out when a total it belongs to is collected."""
    stems = [c.removesuffix(".sum") for c in columns]
    totals = any(s.startswith(prefix + "src_") for s in stems)
    return [f"{s}.sum" for s in stems
            if not (totals and not s.startswith(prefix + "src_"))                 # an instruction family's part
            and not any(other != s and s.startswith(other + "_") for other in stems)]  # a destination/sparsity part


def _tensor_flops(numeric: pd.DataFrame, out: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Tensor FLOPs and their basis: sm__ops_path_tensor_* when collected, else tensor-pipe instructions x
    the FLOPs per instruction of the kernel's MMA shape on its architecture (data/tensor_inst_flops.json).
    Where the tensor pipe is shared with non-MMA work, a kernel not judged a Tensor Core user gets 0."""
    prefix = _recipes()["tensor_ops_prefix"]
    ops = tensor_ops_columns([c for c in numeric.columns if c.startswith(prefix) and c.endswith(".sum")], prefix)
    if ops:
        return numeric[ops].sum(axis=1, min_count=1), pd.Series("sm__ops_path_tensor counters", index=out.index)
    pairs = out[["kernel_name", "cc"]].astype(str)
    distinct = pairs.drop_duplicates()
    looked_up = {(n, c): flops_per_tensor_instruction(n, c) for n, c in distinct.itertuples(index=False)}
    keys = list(zip(pairs["kernel_name"], pairs["cc"]))
    factor = pd.Series([looked_up[k][0] for k in keys], index=out.index, dtype="float64")
    basis = pd.Series([looked_up[k][1] for k in keys], index=out.index, dtype=object)
    shared = out["cc"].astype(str).map(lambda c: bool((_inst_flops()["architectures"].get(c) or {})
                                                      .get("shared_tensor_pipe")))
    not_mma = shared & (out["uses_tc"] == 0) & factor.notna()
    flops = out["tensor_pipe_inst"] * factor
    flops = flops.where(~not_mma, 0.0)
    basis = basis.where(~not_mma, "not a Tensor Core kernel (shared tensor pipe: FP16x2/FP64 work)")
    none = out["tensor_pipe_inst"] == 0
    flops = flops.where(~none, 0.0)
    basis = basis.where(~none, "no tensor-pipe instructions")
    return flops.astype("float64"), basis.where(out["tensor_pipe_inst"].notna(), "")


def _first_present(numeric: pd.DataFrame, alternatives: list[list[str]]) -> pd.Series:
    """Per kernel, the sum of the first alternative it has a value for; NaN where it has none."""
    out = pd.Series(np.nan, index=numeric.index, dtype="float64")
    for names in alternatives:
        present = [name for name in names if name in numeric.columns]
        if present:
            out = out.fillna(numeric[present].sum(axis=1, min_count=1).astype("float64"))
    return out


def _exact_mma(numeric: pd.DataFrame, rule: dict) -> pd.Series:
    """Per kernel, HMMA-pipe instructions minus its HFMA2 ones (plus IMMA and DMMA where collected): the MMA
    instructions exactly; NaN where the CSV lacks the pair."""
    for recipe in rule["exact_mma"]:
        if recipe["minuend"] in numeric.columns and recipe["subtrahend"] in numeric.columns:
            mma = numeric[recipe["minuend"]] - numeric[recipe["subtrahend"]]
            for extra in (c for c in recipe["add"] if c in numeric.columns):
                mma = mma + numeric[extra].fillna(0.0)
            return mma.astype("float64")
    return pd.Series(np.nan, index=numeric.index, dtype="float64")


def tensor_core_verdicts(numeric: pd.DataFrame, names: pd.Series) -> pd.DataFrame:
    """Per kernel: MMA instructions, all instructions, their share and the Tensor Core verdict.

    The first rule of data/ncu_tensor_core.json the counters allow decides: the exact MMA count (HMMA minus
    HFMA2) above 0; any MMA-only instruction (warpgroup MMA, IMMA, DMMA); the MMA share of all instructions
    (>= min_tensor_share); else the kernel-name rule (uses_tc_source "name"). A bare tensor-pipe count is
    never a verdict: the pipe also issues FP16x2 (GA100, GH100's HFMA2) and FP64 (GA100) work.
    """
    rule = _tc_rule()
    exact = _exact_mma(numeric, rule)
    share_mma = _first_present(numeric, rule["tensor_instructions"])
    mma = exact.fillna(share_mma)
    total = _first_present(numeric, [[name] for name in rule["total_instructions"]])
    share = (mma / total.where(total > 0)).astype("float64")
    only = [c for c in rule["mma_only_instructions"] if c in numeric.columns]
    mma_only = (numeric[only].fillna(0.0) > 0).any(axis=1) if only else pd.Series(False, index=numeric.index)
    by_name = classify_names(names.reset_index(drop=True), kernel_uses_tc)
    uses = np.where(exact.notna().to_numpy(), (exact > 0).to_numpy(),
                    np.where(mma_only.to_numpy(), True,
                             np.where(share.notna().to_numpy(), (share >= rule["min_tensor_share"]).to_numpy(),
                                      by_name)))
    counted = (exact.notna() | mma_only | share.notna()).to_numpy()
    return pd.DataFrame({"mma_inst": mma, "total_inst": total, "tensor_share": share,
                         "uses_tc": uses.astype(int), "uses_tc_source": np.where(counted, "counters", "name")},
                        index=numeric.index)


def nvtx_range_names(cell: str) -> list[str]:
    """The NVTX range names of one ncu ``--nvtx`` cell, outermost first: each quoted
    "domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg" gives its name (which may itself hold colons)."""
    names = []
    for text in _NVTX_RANGE.findall(cell or ""):
        parts = text.split(":")
        name = ":".join(parts[1:-_NVTX_ATTRIBUTES]) if len(parts) > _NVTX_ATTRIBUTES + 1 else ":".join(parts[1:])
        if name:
            names.append(name)
    return names


def _nvtx_ranges(identity: pd.DataFrame) -> pd.Series:
    """Per kernel, the JSON list of the NVTX ranges open at its launch (push/pop stack, then start/end ranges),
    from the columns ``ncu --nvtx`` adds; None when the file has no such column. Each distinct cell is parsed
    once."""
    columns = [c for c in identity.columns if _NVTX_COLUMN.search(str(c))]
    if not columns:
        return pd.Series(None, index=identity.index, dtype=object)
    joined = identity[columns].astype(str).agg("\x1f".join, axis=1)
    codes, cells = pd.factorize(joined)
    parsed = np.array([json.dumps([n for part in cell.split("\x1f") for n in nvtx_range_names(part)])
                       for cell in cells], dtype=object)
    return pd.Series(parsed[codes], index=identity.index, dtype=object)


def read_ncu_csv(path: str | Path) -> pd.DataFrame:
    """One row per profiled kernel launch with the roofline quantities (columns ``NCU_COLUMNS``).

    FLOPs per precision = add + mul + 2 × fma thread-instruction counts; a column is NaN when the file
    lacks its counters (never 0 for "not measured"). time_ns = gpu__time_duration.sum when present, else
    sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second. uses_tc: see :func:`tensor_core_verdicts`.
    """
    path = Path(path)
    frame = _read_table(path)
    long_layout = {"Metric Name", "Metric Value"} <= set(frame.columns)
    identity, numeric = _long_to_metrics(frame) if long_layout else _wide_to_metrics(frame)
    if numeric.empty:
        raise InputError(path, "ncu CSV has no metric values")
    numeric = numeric.reindex(identity.index)
    out = pd.DataFrame(index=identity.index)
    ids = pd.to_numeric(identity.index.to_series().str.replace(",", ""), errors="coerce").astype("float64")
    out["kernel_id"] = ids.where((ids % 1 == 0) & (ids.abs() < 2**53))  # an ID that is no integer says nothing
    out["process_id"] = (pd.to_numeric(identity["Process ID"], errors="coerce")
                         if "Process ID" in identity else np.nan)
    out["kernel_name"] = identity["Kernel Name"].astype(str)
    out["device"] = pd.to_numeric(identity["Device"], errors="coerce") if "Device" in identity else np.nan
    name_metric = _recipes()["device_name_metric"]
    out["device_name"] = identity[name_metric].astype(str) if name_metric in identity else ""
    out["cc"] = _compute_capability(identity, numeric)
    for column in ("flops_fp64", "flops_fp32", "flops_fp16", "flops_fma", "bytes_l1", "bytes_l2", "bytes_dram",
                   "tensor_pipe_inst", "cycles", "cycles_per_second"):
        out[column] = _combine(numeric, column)
    measured = _combine(numeric, "gpu_time_ns")
    from_cycles = out["cycles"] / out["cycles_per_second"] * 1e9
    out["time_ns"] = measured.fillna(from_cycles)
    out["time_source"] = np.where(measured.notna(), "gpu__time_duration",
                                  np.where(from_cycles.notna(), "sm__cycles_elapsed", ""))
    out = out.join(tensor_core_verdicts(numeric, out["kernel_name"]))
    out["flops_tensor"], out["tensor_flops_basis"] = _tensor_flops(numeric, out)
    for column, axes in (("Grid Size", GEOMETRY[:3]), ("Block Size", GEOMETRY[3:])):
        text = identity[column].astype(str) if column in identity else pd.Series("", index=identity.index)
        parts = text.str.extract(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
        for i, axis in enumerate(axes):
            out[axis] = pd.to_numeric(parts[i], errors="coerce").astype("float64")
    out["nvtx_ranges"] = _nvtx_ranges(identity)
    out = out.sort_values("kernel_id", kind="stable").reset_index(drop=True)
    out["kernel_id"] = out["kernel_id"].astype("Int64")
    for axis in GEOMETRY:
        out[axis] = out[axis].astype("Int64")
    return out[list(NCU_COLUMNS)]


def write_ncu_kernels(conn: sqlite3.Connection, frame: pd.DataFrame, source: str = "") -> int:
    """Store a read_ncu_csv frame in the profile database (creates ncu_kernels); returns rows written."""
    conn.executescript(NCU_DDL)
    have = {r[1] for r in conn.execute("PRAGMA table_info(ncu_kernels)")}
    for name, kind in (("mma_inst", "REAL"), ("total_inst", "REAL"), ("tensor_share", "REAL"),
                       ("uses_tc", "INTEGER"), ("uses_tc_source", "TEXT"), ("tensor_flops_basis", "TEXT"),
                       ("flops_fma", "REAL"), *((axis, "INTEGER") for axis in GEOMETRY), ("nvtx_ranges", "TEXT")):
        if name not in have:  # a database written before the Tensor Core verdict existed
            conn.execute(f"ALTER TABLE ncu_kernels ADD COLUMN {name} {kind}")
    cols = ["source", *NCU_COLUMNS]
    records = frame.assign(source=source)[cols].astype(object).where(frame.assign(source=source)[cols].notna(),
                                                                     None)
    conn.executemany(f"INSERT INTO ncu_kernels ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                     records.itertuples(index=False, name=None))
    return len(records)


def _launch_name(names: pd.Series) -> pd.Series:
    """A kernel name as both tools may spell it: no leading 'void ', whitespace collapsed."""
    return names.fillna("").astype(str).str.replace(r"^void\s+", "", regex=True).str.replace(r"\s+", " ",
                                                                                              regex=True).str.strip()


def match_trace_kernels(ncu: pd.DataFrame, trace: pd.DataFrame) -> pd.DataFrame:
    """Pair each Nsight Compute kernel with the trace kernel of the same run it profiled.

    The k-th ncu launch of a name (in ncu's launch order, ``kernel_id``) is the k-th trace launch of that name
    (in start order): ncu serializes launches but keeps their order. The launch geometry must then agree; a
    pair whose grid or block differs is kept with ``geometry_match`` 0 (ncu ``--launch-skip`` / ``-c`` shift
    the order, which this shows), and a geometry one side did not record gives NULL. ``trace`` needs
    kernel_id, name, start and the GEOMETRY columns (op_id, node_id, op_name, iteration come along). Returns one
    row per ncu kernel: ncu_index (the ncu frame's index), trace_kernel_id (NaN when unmatched),
    geometry_match and the trace columns."""
    left = pd.DataFrame({"ncu_index": ncu.index, "key": _launch_name(ncu["kernel_name"]).to_numpy(),
                         "order": ncu["kernel_id"].to_numpy()})
    left["nth"] = left.sort_values(["order", "ncu_index"], kind="stable").groupby("key").cumcount() \
        .reindex(left.index)
    extra = [c for c in ("op_id", "node_id", "op_name", "iteration", "dur", "launch_ts", "pid", "rank")
             if c in trace.columns]
    right = trace[["kernel_id", "start", *GEOMETRY, *extra]].rename(columns={"kernel_id": "trace_kernel_id",
                                                                             **{g: f"trace_{g}" for g in GEOMETRY}})
    right = right.assign(key=_launch_name(trace["name"]).to_numpy())
    right["nth"] = right.sort_values(["start", "trace_kernel_id"], kind="stable").groupby("key").cumcount() \
        .reindex(right.index)
    pairs = left.merge(right, on=["key", "nth"], how="left")
    mine = ncu.loc[pairs["ncu_index"], list(GEOMETRY)].astype("float64").to_numpy()
    theirs = pairs[[f"trace_{g}" for g in GEOMETRY]].astype("float64").to_numpy()
    known = ~(np.isnan(mine) | np.isnan(theirs))
    agree = np.where(known, mine == theirs, True).all(axis=1)
    any_known = known.any(axis=1) & pairs["trace_kernel_id"].notna().to_numpy()
    pairs["geometry_match"] = pd.array(np.where(any_known, agree.astype(int), -1), dtype="Int64")
    pairs.loc[pairs["geometry_match"] == -1, "geometry_match"] = pd.NA
    return pairs.drop(columns=["key", "nth", "order", *[f"trace_{g}" for g in GEOMETRY]])
