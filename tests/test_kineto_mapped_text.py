"""A plain trace is read through a memory map: the pages of decoded pieces must not stay mapped (they count in
the import's memory), and dropping them must not change what is read."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest
from conftest import assert_same_rows
from trace_builder import KinetoTrace

from dlscope.importers.kineto import Reading, load_kineto
from dlscope.importers.kineto.text import release
from dlscope.model import TABLES

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

PIECE = 64 * 1024


def _mapped_kib(path: Path) -> int:
    """The kernel's count of this process's resident pages mapping ``path`` (0 when it is not mapped)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line: "start-end perms ... path"
            inside = line.endswith(str(path))
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


def _large_trace(tmp_path: Path, events: int = 12_000) -> Path:
    t = KinetoTrace()
    t.step(1, 0, 4 * events)
    for i in range(events):
        t.op(f"aten::op{i % 11}", 1 + 3 * i, 2 + 3 * i)
        t.launch(1.2 + 3 * i, 1.5 + 3 * i, f"kernel_{i % 7}", 3 + 3 * i, 3.5 + 3 * i)
    return t.write(tmp_path / "large.json")


@pytest.mark.parametrize("processes", [1, 2])
def test_decoded_pieces_do_not_stay_mapped_and_the_tables_are_the_event_by_event_ones(tmp_path, processes):
    path = _large_trace(tmp_path)
    size_kib = path.stat().st_size // 1024
    assert size_kib > 40 * PIECE // 1024  # the test's premise: many pieces
    mapped: list[int] = []
    pieces = load_kineto(path, progress=lambda _b, _e: mapped.append(_mapped_kib(path)),
                         reading=Reading(method="in_memory", processes=processes, piece_bytes=PIECE, fallback=False))
    assert len(mapped) > 15
    # at each piece's end this process maps at most about one piece ahead (the kernel maps up to 64 KiB around
    # a fault), never the text behind it: without the release the count climbs to this process's share
    assert max(mapped) <= 3 * PIECE // 1024, (max(mapped), size_kib)
    whole = load_kineto(path, reading=Reading(method="ijson"))
    for name in list(TABLES):
        assert_same_rows(getattr(pieces, name), getattr(whole, name), name)
    assert len(pieces.ops) == 12_000 and len(pieces.kernels) == 12_000


def test_released_pages_read_back_the_same_bytes(tmp_path):
    path = tmp_path / "bytes.bin"
    data = bytes(range(256)) * (64 * mmap.PAGESIZE // 256)
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as text:
        assert bytes(text) == data  # every page mapped
        before = _mapped_kib(path)
        release(text, 3 * mmap.PAGESIZE + 17, 40 * mmap.PAGESIZE + 5)  # pages 3..39: the one holding the end is kept
        assert before - _mapped_kib(path) == 37 * mmap.PAGESIZE // 1024
        assert bytes(text) == data
    release(data, 0, len(data))  # decompressed text: nothing to drop, nothing changed
