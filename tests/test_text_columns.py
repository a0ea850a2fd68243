"""Text columns of the model are categorical: each distinct string held once, an integer code per row
(issue 21: a kernel name is ~240 bytes, repeated on every launch)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import data_file
from raw_kineto import KERNEL_CATS, OP_CATS, events

from dlscope.model import Profile, filled_text, make_table, text_column, value_counts


def test_text_column_holds_each_distinct_string_once_in_sorted_order():
    values = ["b", "a", None, "b", "é", "A", "b"]
    column = text_column(values)
    assert list(column.categories) == ["", "A", "a", "b", "é"]  # sorted as Python sorts str; "" always there
    assert [None if pd.isna(v) else v for v in column] == values
    objects = np.asarray(column[column.notna()], dtype=object)
    assert objects[0] is objects[2] is objects[5]  # the rows share one string object


def test_filled_text_makes_missing_values_empty_strings():
    column = filled_text(pd.Series(["x", None, "a"], dtype=object))
    assert list(column) == ["x", "", "a"] and list(column.categories) == ["", "a", "x"]


def test_rows_gained_by_a_reindex_fill_with_the_missing_string():
    kernels = make_table("kernels", {"name": ["gemm", "relu"]})
    assert list(kernels["name"].reindex([1, 0, 5]).fillna("")) == ["relu", "gemm", ""]


def test_value_counts_count_only_the_values_present_ties_in_order_of_first_appearance():
    values = ["b", "a", "b", "c", "a"]
    column = pd.Series(pd.Categorical(values, categories=["a", "b", "c", "unused"]))
    counts = value_counts(column)
    assert list(counts.items()) == [("b", 2), ("a", 2), ("c", 1)]  # by hand: no "unused", b first among ties
    assert list(counts.items()) == list(pd.Series(values, dtype=object).value_counts().items())  # pandas on str
    assert list(value_counts(column, sort=False).items()) == [("b", 2), ("a", 2), ("c", 1)]


def test_ranks_concatenated_keep_their_text_categorical():
    a = make_table("kernels", {"name": ["gemm", "relu"], "start": [0, 1]})
    b = make_table("kernels", {"name": ["nccl", "gemm"], "start": [2, 3]})
    merged = Profile.concat([Profile(kernels=a), Profile(kernels=b)]).kernels
    assert isinstance(merged["name"].dtype, pd.CategoricalDtype)
    assert list(merged["name"]) == ["gemm", "relu", "nccl", "gemm"]
    assert list(merged["name"].cat.categories) == ["", "gemm", "nccl", "relu"]
    assert list(merged["kernel_id"]) == [0, 1, 2, 3]


def test_a_real_traces_names_are_stored_once_per_distinct_name():
    """The kernels' and ops' names as the raw JSON has them; the name column costs its integer codes plus each
    distinct name once (it cost a string per row)."""
    from dlscope.pipeline.executors import import_file

    path = data_file("kineto", "hta_v100_rank1of2_5steps.json.gz")
    profile = import_file(str(path))
    for table, cats in (("kernels", KERNEL_CATS), ("ops", OP_CATS)):
        raw = [e.name for e in events(path) if e.cat in cats and not e.name.startswith("ProfilerStep#")]
        column = profile.table(table)["name"]
        assert isinstance(column.dtype, pd.CategoricalDtype)
        assert Counter(column) == Counter(raw)
        assert set(column.cat.categories) - {""} == set(raw) - {""}
        distinct = sum(sys.getsizeof(name) for name in set(raw))
        per_row = sum(sys.getsizeof(name) for name in raw) / len(raw)
        cost = int(column.memory_usage(deep=True, index=False))
        assert cost <= 4 * len(raw) + distinct + 64 * 1024, (table, cost)
        assert cost < len(raw) * per_row / 5, (table, cost)


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration, ValueError):
        return 0


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc smaps_rollup")
def test_the_memory_budget_estimate_is_above_a_real_imports_peak(tmp_path):
    """``--max-memory`` refuses what its estimate says would not fit: the estimate must exceed the import's
    real peak, here the summed PSS of the whole process tree (parse, analysis, critical path, writer), sampled
    from /proc every 20 ms."""
    import psutil

    from dlscope.pipeline.budget import analysis_memory
    from dlscope.pipeline.executors import import_file

    path = data_file("kineto", "hta_v100_rank1of2_5steps.json.gz")
    estimate = analysis_memory(import_file(str(path)))
    proc = psutil.Popen([sys.executable, "-m", "dlscope", "import", str(path), "-o", str(tmp_path / "p.sqlite"),
                         "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc.pid] + [p.pid for p in proc.children(recursive=True)]
        except psutil.Error:
            break
        peak = max(peak, sum(_pss(pid) for pid in tree))
        time.sleep(0.02)
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    assert 100 * 2**20 < peak < estimate, (peak / 2**20, estimate / 2**20)


@pytest.mark.parametrize("source", [("kineto", "hta_event_sync_a100.json.gz"),
                                    ("tf_trace", "tf2_keras_cnn_sm75.trace.json.gz"),
                                    ("tf_trace", "tf2_keras_cnn_sm75.xplane.pb"),
                                    ("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite"),
                                    ("nsys_sqlite", "pipit_cloverleaf_a100x4_nsys2024.5.sqlite")])
def test_every_importer_gives_every_text_column_its_words_once(source):
    """Each format's importer, including what it renames after building its tables (TF's launch calls), leaves
    every text column of the model categorical: a job's files then join without a string per row."""
    from dlscope.model import TABLES, S
    from dlscope.pipeline.executors import import_file

    profile = import_file(str(data_file(*source)))
    for name, spec in TABLES.items():
        table = profile.table(name)
        for col in (c for c, dtype in spec.items() if dtype == S):
            assert isinstance(table[col].dtype, pd.CategoricalDtype), (name, col)
            assert table[col].cat.categories.is_unique, (name, col)
