"""Python frames as traces record them: names parsed into file, line and function, the bound on how many an
import keeps, and which frame is the user's (the innermost one outside library code, for an op's stack).

Kineto names a frame ``path/file.py(123): func`` (with_stack=True) and a C function ``<built-in method ...>``;
the legacy ``Call stack`` arg of an op lists such names innermost first, ``;``-separated. Names repeat with every
call, so each distinct name is parsed once.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$", re.S)
#: the object address in a built-in's name ("<built-in method view of Tensor object at 0x7f...>"): it differs per
#: object, not per function, so it is dropped from the function (the name keeps it)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@lru_cache(maxsize=1)
def settings() -> dict[str, Any]:
    return json.loads(resources.files("dlscope.data").joinpath("python_frames.json").read_text())


#: the most Python frames one trace keeps by default (the longest are kept; see :func:`bounded`)
MAX_FRAMES: int = settings()["max_frames"]


@lru_cache(maxsize=65536)
def parse_name(name: str) -> tuple[str, int, str]:
    """("path/file.py", 123, "func") from "path/file.py(123): func"; ("", -1, name less any object address)
    for a built-in."""
    m = _FRAME.match(name)
    if m is None:
        return "", -1, _ADDRESS.sub("", name)
    return m.group("file"), int(m.group("line")), m.group("function")


def parse_names(names: Any) -> tuple[list[str], np.ndarray, list[str]]:
    """File, line and function columns of a column of frame names (each distinct name parsed once)."""
    import pandas as pd  # (loaded only for traces with Python frames: a job's forked parse may not need it)

    codes, uniques = pd.factorize(pd.Series(names, dtype=object), sort=False)
    parsed = [parse_name(str(n)) for n in uniques]
    files = np.array([p[0] for p in parsed] or [""], dtype=object)
    lines = np.array([p[1] for p in parsed] or [-1], dtype=np.int64)
    funcs = np.array([p[2] for p in parsed] or [""], dtype=object)
    codes = np.asarray(codes, dtype=np.int64)
    return files[codes].tolist(), lines[codes], funcs[codes].tolist()


@lru_cache(maxsize=65536)
def is_user_file(file: str) -> bool:
    """Whether a frame's file is the user's code: not a built-in, the standard library or a known library."""
    if not file:
        return False
    cfg = settings()
    if any(part in file for part in cfg["library_path_parts"]):
        return False
    first = file.replace("\\", "/").lstrip("/").split("/", 1)[0].removesuffix(".py")
    return first not in sys.stdlib_module_names and first not in set(cfg["library_packages"])


def where(file: str, line: int) -> str:
    """A frame's place as the ops table shows it: ``file.py:123``."""
    return f"{file}:{line}" if line >= 0 else file


@lru_cache(maxsize=65536)
def innermost_user_frame(call_stack: str) -> str:
    """``file.py:123`` of the innermost user frame of a legacy ``Call stack`` arg ("" when none is the user's)."""
    for name in call_stack.split(";"):
        file, line, _ = parse_name(name.strip())
        if is_user_file(file):
            return where(file, line)
    return ""


def bounded(start: np.ndarray, end: np.ndarray, max_frames: int) -> np.ndarray:
    """Row indices of the frames kept, in input order: all of them, or the ``max_frames`` longest (ties: the
    earlier first). A frame never outlasts its parent, so the dropped ones are the shortest calls, leaves first;
    a kept frame whose parent was dropped hangs from its nearest kept ancestor."""
    n = len(start)
    if n <= max_frames:
        return np.arange(n, dtype=np.int64)
    order = np.lexsort((np.arange(n), start, -(end - start)))
    return np.sort(order[:max(max_frames, 0)])
