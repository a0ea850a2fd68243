"""Import PaddlePaddle's profiler trace (``paddle.profiler.export_chrome_tracing``: ``*.paddle_trace.json``).

A Chrome trace with Paddle's own event categories (``cat``: Operator, ProfileStep, Dataloader, Kernel,
CudaRuntime ...; the table is ``data/paddle_trace.json``). Names carry their duration (``matmul dygraph[12.3
us]``), which is cut off; an op's name is its Paddle op type. Paddle writes ``ts`` as whole µs (cut, not
rounded) but each event's ``start_time``/``end_time`` args as µs with 3 decimals from the profiler's start,
so times are taken from those, exact to the ns, on the epoch of the first event's ``ts``. A thread's Python and
C++ rows (``4938(Python)``, ``4938(C++)``) are one OS thread and become one ``tid``. ``ProfileStep#N``
(``prof.step()``) are the steps; Dataloader events are the data loading (Paddle's reader_cost).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, reading
from ..model import Profile, make_table

_DURATION_SUFFIX = re.compile(r"\[[0-9.]+ ?[mun]?s\]$")
_US = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]*)?)\s*us\s*$")
_PADDLE_TID = re.compile(rb'"tid": ?"\d+\((?:Python|C\+\+)\)"')


@lru_cache(maxsize=1)
def categories() -> dict[str, Any]:
    return json.loads(resources.files("dlscope.data").joinpath("paddle_trace.json").read_text())


def looks_like_paddle(head: bytes) -> bool:
    """Paddle's export: a ``span_index`` key, or thread ids written as ``"<tid>(Python)"``/``"<tid>(C++)"``."""
    return b'"span_index"' in head or bool(_PADDLE_TID.search(head))


def _rel_ns(text: Any) -> int | None:
    m = _US.match(str(text)) if text is not None else None
    if not m:
        return None
    try:
        return int((Decimal(m.group(1)) * 1000).to_integral_value())
    except InvalidOperation:
        return None


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        m = re.search(r"\d+", str(value)) if value is not None else None
        return int(m.group(0)) if m else default


def _clean(name: str) -> str:
    return _DURATION_SUFFIX.sub("", name).strip()


def _shapes(args: dict) -> tuple[str, str]:
    """Paddle's ``input_shapes``/``input_dtypes`` ({input name: [shape, ...]}) as JSON lists in input order."""
    shapes, dtypes = args.get("input_shapes"), args.get("input_dtypes")
    if not isinstance(shapes, dict) or not shapes:
        return "", ""
    flat_shapes, flat_types = [], []
    for key, value in shapes.items():
        items = value if isinstance(value, list) and value and isinstance(value[0], list) else [value]
        types = (dtypes or {}).get(key) if isinstance(dtypes, dict) else None
        types = types if isinstance(types, list) else [types] * len(items)
        flat_shapes += items
        flat_types += [str(t) if t is not None else "" for t in types][:len(items)]
    return json.dumps(flat_shapes, separators=(",", ":")), json.dumps(flat_types, separators=(",", ":"))


def load_paddle(path: str | Path) -> Profile:
    """Import one Paddle profiler Chrome trace."""
    path = Path(path)
    with reading(path):
        text = Path(path).read_bytes()
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InputError(path, f"is not valid JSON ({e})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise InputError(path, "has no traceEvents list")
    cats = categories()
    step_rx = re.compile(cats["step_name"])
    rows: dict[str, list[dict]] = {k: [] for k in ("ops", "ranges", "api_calls", "kernels", "memops")}
    base: int | None = None
    found: dict[str, int] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        args: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
        cat = str(ev.get("cat", ""))
        start, end = _rel_ns(args.get("start_time")), _rel_ns(args.get("end_time"))
        if start is None or end is None:
            continue
        if base is None:
            try:
                base = int(Decimal(str(ev.get("ts", 0))) * 1000) - start
            except InvalidOperation:
                base = 0
        found[cat] = found.get(cat, 0) + 1
        name = _clean(str(ev.get("name", "")))
        pid, tid = _int(ev.get("pid"), 0), _int(ev.get("tid"), 0)
        common = {"rank": 0, "pid": pid, "start": start, "end": end}
        if cat in cats["ops"]:
            op = name.removesuffix(" dygraph").removesuffix(" compute").strip()
            shapes, dtypes = _shapes(args)
            rows["ops"].append({**common, "tid": tid, "name": op, "op_type": op.split(" ")[0],
                                "direction": "bwd" if "grad" in op.lower() else "fwd",
                                "input_shapes": shapes, "input_dtypes": dtypes})
        elif cat in cats["steps"]:
            m = step_rx.match(name)
            rows["ranges"].append({**common, "tid": tid, "device": -1, "domain": "step",
                                   "name": f"ProfilerStep#{m.group(1)}" if m else name})
        elif cat in cats["dataloader"]:
            rows["ranges"].append({**common, "tid": tid, "device": -1, "domain": "dataloader",
                                   "name": name if "data" in name.lower() else f"Dataloader {name}"})
        elif cat in cats["ranges"]:
            rows["ranges"].append({**common, "tid": tid, "device": -1, "domain": cats["ranges"][cat], "name": name})
        elif cat in cats["api_calls"]:
            rows["api_calls"].append({**common, "tid": tid, "name": name, "kind": cats["api_calls"][cat],
                                      "correlation": _int(args.get("correlation id"))})
        elif cat in cats["kernels"] or cat in cats["memcpy"] or cat in cats["memset"]:
            device = _int(args.get("device"), _int(ev.get("pid"), 0))
            stream = _int(args.get("stream"), _int(ev.get("tid"), 0))
            gpu = {**common, "device": device, "stream": stream, "name": name,
                   "correlation": _int(args.get("correlation id"))}
            if cat in cats["kernels"]:
                grid, block = args.get("grid") or [], args.get("block") or []
                gpu.update({f"grid_{a}": _int(v) for a, v in zip("xyz", grid)})
                gpu.update({f"block_{a}": _int(v) for a, v in zip("xyz", block)})
                gpu["registers"] = _int(args.get("registers per thread"))
                gpu["shared_mem"] = _int(args.get("shared memory"))
                rows["kernels"].append(gpu)
            else:
                memset = cat in cats["memset"]
                kind = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP)", name)
                gpu.update({"kind": "memset" if memset else "memcpy", "bytes": _int(args.get("bytes"), -1),
                            "copy_kind": "" if memset or not kind else kind.group(1)})
                rows["memops"].append(gpu)
    base = base or 0
    tables = {}
    for name, table_rows in rows.items():
        if not table_rows:
            tables[name] = Profile().table(name)
            continue
        cols: dict[str, Any] = {k: [r.get(k, -1) for r in table_rows]
                                for k in dict.fromkeys(k for r in table_rows for k in r)}
        for col in ("start", "end"):
            cols[col] = np.asarray(cols[col], dtype=np.int64) + base
        id_col = {"ops": "op_id", "ranges": "range_id", "api_calls": "api_id", "kernels": "kernel_id",
                  "memops": "memop_id"}[name]
        cols[id_col] = np.arange(len(table_rows), dtype=np.int64)
        tables[name] = make_table(name, cols)
    profile = Profile(**tables)
    extra = doc.get("ExtraInfo") if isinstance(doc, dict) else None
    profile.meta = {"source_format": "paddle", "source_path": str(path), "rank": 0,
                    "schema_version": doc.get("schemaVersion") if isinstance(doc, dict) else None,
                    "found": ", ".join(f"{n} {cat or '(no category)'} events" for cat, n in
                                       sorted(found.items(), key=lambda kv: -kv[1])) or "no complete events",
                    "system": {"framework": "PaddlePaddle"}}  # the format is Paddle's profiler's own
    if isinstance(extra, dict):
        profile.meta["paddle_extra"] = {k: v for k, v in extra.items() if isinstance(v, str)}
    return profile
