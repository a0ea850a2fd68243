"""The parse of a job's files: grouped per worker task, each table joined once in the parent.

Oracles: the raw JSON of each rank (counted here with the standard library), hand-made groupings, and pandas'
own concatenation of the files imported one by one.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import data_file

from dlscope.model import ID_COLUMNS, TABLES, S, text_column
from dlscope.pipeline import head_start
from dlscope.pipeline.executors import (
    _SegmentWriter,
    file_groups,
    import_file,
    import_group_to_bytes,
    import_group_to_files,
    joined_profile,
    load_profiles_parallel,
)
from dlscope.pipeline.inputs import expand_inputs

DLRM = ("kineto", "param_dlrm_8rank_v100")
#: files of three formats whose text columns hold different words (pandas alone would join them as objects)
MIXED = (("kineto", "hta_event_sync_a100.json.gz"), ("tf_trace", "tf2_keras_cnn_sm75.trace.json.gz"),
         ("nsys_sqlite", "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite"))


@pytest.mark.parametrize(("sizes", "workers", "expected"), [
    ([10] * 8, 2, [[0, 1], [2, 3], [4, 5], [6, 7]]),  # 2 groups per worker, of equal bytes
    ([10] * 8, 1, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ([10] * 3, 4, [[0], [1], [2]]),  # never more groups than files
    ([100, 1, 1, 1, 1], 2, [[0], [1, 2, 3, 4]]),  # a file larger than a group's share is a group of its own
    ([0, 0, 0, 0], 2, [[0], [1], [2], [3]]),  # unsized files (pipes, gone) still count
])
def test_files_are_grouped_in_order_into_about_two_groups_per_worker(sizes, workers, expected):
    assert [list(g) for g in file_groups(sizes, workers)] == expected


def _raw(path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def test_a_job_parsed_by_two_workers_has_each_rank_rows_as_its_raw_trace(tmp_path):
    """8 DLRM ranks in 4 groups of 2: every kernel of every rank, under the rank its trace names, ids 0..n-1."""
    paths = expand_inputs([data_file(*DLRM)])
    profile = load_profiles_parallel(paths, workers=2)
    expected_ranks, expected_names = [], Counter()
    for path in paths:
        raw = _raw(path)
        rank = raw["distributedInfo"]["rank"]
        kernels = [e for e in raw["traceEvents"] if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]
        expected_ranks += [rank] * len(kernels)
        expected_names.update((rank, e["name"]) for e in kernels)
    kernels = profile.kernels
    assert kernels["rank"].tolist() == expected_ranks  # in input order, each file's rows together
    assert Counter(zip(kernels["rank"].tolist(), kernels["name"].tolist())) == expected_names
    for name, col in ID_COLUMNS.items():
        assert profile.table(name)[col].tolist() == list(range(len(profile.table(name)))), name
    assert [s["rank"] for s in profile.meta["sources"]] == [_raw(p)["distributedInfo"]["rank"] for p in paths]
    assert [s["source_path"] for s in profile.meta["sources"]] == [str(p) for p in paths]


def _concat_of_files(paths) -> dict[str, pd.DataFrame]:
    """The oracle: each file imported alone, its rows given its place as rank, joined by pandas, ids renumbered."""
    frames = {name: [] for name in TABLES}
    for rank, path in enumerate(paths):
        profile = import_file(str(path))
        for name in TABLES:
            frames[name].append(profile.table(name).assign(rank=np.int64(rank)))
    out = {}
    for name, parts in frames.items():
        frame = pd.concat(parts, ignore_index=True)
        if name in ID_COLUMNS:
            frame[ID_COLUMNS[name]] = np.arange(len(frame), dtype=np.int64)
        out[name] = _as_strings(frame)
    return out


def _as_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns as plain Python strings, so that rows compare by value whatever their encoding."""
    return frame.assign(**{c: frame[c].astype(object) for c in frame.columns
                           if isinstance(frame[c].dtype, (pd.CategoricalDtype, pd.StringDtype))})


def _text_stays_categorical(profile) -> None:
    for name, spec in TABLES.items():
        for col in (c for c, dtype in spec.items() if dtype == S):
            assert isinstance(profile.table(name)[col].dtype, pd.CategoricalDtype), (name, col)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_files_whose_text_columns_hold_different_words_join_row_for_row_and_stay_categorical(workers):
    """Each file's text columns have their own words; joined, the rows equal pandas' join of the files (which
    would make them objects), and each text column still holds each distinct word once."""
    paths = [data_file(*p) for p in MIXED]
    _joined_as_pandas_joins_the_files(paths, workers)


def _joined_as_pandas_joins_the_files(paths, workers: int) -> tuple:
    """The job's profile, row for row pandas' join of the files imported one by one, text still categorical;
    returns (profile, that join)."""
    expected = _concat_of_files(paths)
    profile = load_profiles_parallel(paths, workers=workers)
    _text_stays_categorical(profile)
    for name in TABLES:
        pd.testing.assert_frame_equal(_as_strings(profile.table(name)), expected[name], check_exact=True, obj=name)
        assert list(profile.table(name).columns) == list(TABLES[name]), name
    return profile, expected


def test_a_group_sends_one_segment_per_table_without_ranks_or_ids(tmp_path):
    """A worker's group of Kineto files: one Arrow file per table, its files' rows joined in one batch (the
    group's DataFrames made once), no rank or id; each file's row count still told."""
    paths = [str(p) for p in expand_inputs([data_file(*DLRM)])][:3]
    group = import_group_to_files(paths, None, str(tmp_path))
    assert len(list(tmp_path.iterdir())) == len(TABLES)
    for name in TABLES:
        (segment,) = group.segments[name]
        rows = [len(import_file(p).table(name)) for p in paths]
        with pa.memory_map(segment.where) as mm:
            reader = pa.ipc.open_file(mm)
            batches = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
            sent = reader.schema.names
        assert batches == ([sum(rows)] if sum(rows) else [])  # one batch for the group (none without rows)
        assert "rank" not in sent and ID_COLUMNS.get(name) not in sent
        assert segment.columns == list(TABLES[name])
        assert group.rows[name] == rows
    assert [m["source_path"] for m in group.metas] == paths


def test_files_whose_text_columns_hold_different_words_share_one_segment():
    """Text goes as its strings (each file's codes mean other words), so different words are not a new type."""
    paths = [str(data_file(*p)) for p in MIXED]
    group = import_group_to_bytes(paths, None)
    for name in TABLES:
        assert len(group.segments[name]) == 1, name
        assert all(dtype == S for col, dtype in group.segments[name][0].dtypes if TABLES[name][col] == S), name
    profile = joined_profile([group], [data_file(*p) for p in MIXED])
    _text_stays_categorical(profile)
    assert profile.syncs["rank"].tolist() == [r for r, n in enumerate(group.rows["syncs"]) for _ in range(n)]


def test_a_file_whose_column_types_differ_starts_a_new_segment():
    """A column whose type differs from the file before it (here a float column where the first file had
    integers) starts a new segment, and the join is pandas' join of the two frames."""
    writer = _SegmentWriter(lambda: (sink := pa.BufferOutputStream(), lambda: sink.getvalue().to_pybytes()))
    first = pd.DataFrame({"a": np.array([1, 2], dtype=np.int64), "b": text_column(["x", "y"])})
    second = pd.DataFrame({"a": np.array([0.5]), "b": text_column(["z"])})
    writer.add(first, set())
    writer.add(first, set())
    writer.add(second, set())
    segments = writer.close()
    assert [str(dict(s.dtypes)["a"]) for s in segments] == ["int64", "float64"]
    assert dict(segments[0].dtypes)["b"] == S
    read = pa.ipc.open_file(pa.BufferReader(segments[0].where)).read_all()
    assert read.num_rows == 4 and read.column("b").to_pylist() == ["x", "y", "x", "y"]


def test_groups_join_in_input_order():
    """Two groups joined: the second group's rows follow the first's, ranks and ids continue."""
    paths = expand_inputs([data_file(*DLRM)])[:4]
    groups = [import_group_to_bytes([str(p) for p in paths[:1]], None),
              import_group_to_bytes([str(p) for p in paths[1:]], None)]
    profile = joined_profile(groups, paths)
    expected = _concat_of_files(paths)
    ranks = [_raw(p)["distributedInfo"]["rank"] for p in paths]
    for name in TABLES:
        expected[name]["rank"] = np.repeat(np.array(ranks, dtype=np.int64), [len(import_file(str(p)).table(name))
                                                                            for p in paths])
        pd.testing.assert_frame_equal(_as_strings(profile.table(name)), expected[name], check_exact=True, obj=name)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_joined_job_holds_each_distinct_name_once(workers):
    """Joined from 8 files, each name column's words are the distinct names of all ranks' raw rows, once."""
    paths = expand_inputs([data_file(*DLRM)])
    profile = load_profiles_parallel(paths, workers=workers)
    raw_kernel_names = {e["name"] for p in paths for e in _raw(p)["traceEvents"]
                        if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"}
    words = profile.kernels["name"].cat.categories
    assert words.is_unique and set(words) - {""} == raw_kernel_names
    for name in ("ops", "kernels", "api_calls"):
        assert len(profile.table(name)) > 0 and profile.table(name)["name"].cat.categories.is_unique


def _dying_on_the_last_file(monkeypatch) -> list:
    """The DLRM job's files, the process reading the last of them dying there (forked readers inherit this)."""
    import os

    from dlscope.pipeline import executors

    paths = expand_inputs([data_file(*DLRM)])
    real = executors.import_job_file

    def dies_on_the_last(path, *args, **kwargs):
        if path == str(paths[-1]):
            os._exit(9)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(executors, "import_job_file", dies_on_the_last)
    return paths


def test_a_worker_that_dies_names_its_group_and_leaves_no_files(tmp_path, monkeypatch):
    """A worker killed while importing (out of memory, say): one InputError naming the first file not read and
    how many others were not, the culprit among them; the Arrow folder is gone."""
    import tempfile

    from dlscope.errors import InputError

    paths = _dying_on_the_last_file(monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(InputError) as failed:
        load_profiles_parallel(paths, workers=2)
    named, message = failed.value.path, failed.value.problem
    first = [str(p) for p in paths].index(named)  # the first file not read; the culprit among it and the others
    others = int(message.split("one of the ")[1].split()[0]) if "one of the" in message else 0
    assert first <= len(paths) - 1 and others <= len(paths) - 1 - first  # the others come after the first
    # the files not read need not follow one another (another worker may have finished the groups between):
    # the culprit is the one named, or among the others, which are named up to three
    assert str(named) == str(paths[-1]) or paths[-1].name in message.split("(")[1] or others > 3
    assert message.startswith("the worker importing it") and "ended abruptly" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_clean_kineto_files_are_joined_column_by_column_as_pandas_joins_the_files(workers):
    """The DLRM ranks come back as column arrays (validation changes none of them) and the job makes each
    table once: row for row pandas' join of the files imported one by one, each word once, sorted."""
    from dlscope.importers import load_for_job
    from dlscope.model import TableColumns

    paths = expand_inputs([data_file(*DLRM)])
    assert all(isinstance(load_for_job(p), TableColumns) for p in paths)  # the path under test
    profile, expected = _joined_as_pandas_joins_the_files(paths, workers)
    for name in TABLES:
        for col, dtype in TABLES[name].items():
            if dtype == S:
                words = list(profile.table(name)[col].cat.categories)
                assert words == sorted(set(expected[name][col].dropna()) | {""}), (name, col)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_validation_changes_is_joined_as_validated_beside_clean_ones(tmp_path, workers):
    """A rank with a kernel that ends before it starts: validated alone (the kernel dropped and counted), and
    joined with a clean rank as pandas joins the two files imported one by one."""
    from dlscope.importers import load_for_job
    from dlscope.model import TableColumns

    clean, bad = expand_inputs([data_file(*DLRM)])[:2]
    raw = _raw(bad)
    kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["dur"] = -5  # ends before it starts
    broken = tmp_path / "rank1.json.gz"
    broken.write_bytes(gzip.compress(json.dumps(raw).encode()))
    assert not isinstance(load_for_job(broken), TableColumns)
    paths = [clean, broken]
    expected = _concat_of_files(paths)
    profile = load_profiles_parallel(paths, workers=workers)
    for name in TABLES:
        pd.testing.assert_frame_equal(_as_strings(profile.table(name)), expected[name], check_exact=True, obj=name)
    assert len(profile.kernels) == sum(1 for p in paths for e in _raw(p)["traceEvents"] if e.get("cat") == "kernel") - 1
    assert profile.meta["sources"][1]["dropped_events"] == {"kernels": {"end_before_start": 1}}


def test_the_default_workers_follow_the_json_bytes_not_the_compressed_bytes(monkeypatch):
    """The job's JSON text (inflated here with gzip) decides: the cores from PARALLEL_MIN_BYTES of it, else 1."""
    import os

    from dlscope.pipeline import executors

    paths = expand_inputs([data_file(*DLRM)])
    json_bytes = sum(len(gzip.decompress(p.read_bytes())) for p in paths)
    assert json_bytes > 10 * sum(p.stat().st_size for p in paths)  # far more than the gzip files' sizes
    monkeypatch.setattr(os, "cpu_count", lambda: 7)
    monkeypatch.setattr(head_start, "PARALLEL_MIN_BYTES", json_bytes)
    assert executors._default_workers(paths) == 7
    monkeypatch.setattr(head_start, "PARALLEL_MIN_BYTES", json_bytes + 1)
    assert executors._default_workers(paths) == 1


class _Spied:
    """ForkedCall, recording the files each forked call was given (the test's proof that the path ran)."""

    def __init__(self, spy, real):
        self.spy, self.real = spy, real

    def __call__(self, fn, *args):
        self.spy.append([str(p) for p in args[0]])
        return self.real(fn, *args)


def _forked_halves(monkeypatch, least: int = 0) -> list:
    from dlscope.pipeline import executors

    spy: list = []
    monkeypatch.setattr(head_start, "FORKED_HALF_MIN_BYTES", least)
    monkeypatch.setattr(executors, "ForkedCall", _Spied(spy, executors.ForkedCall))
    return spy


def test_a_small_job_s_later_half_read_by_a_forked_child_joins_as_pandas_joins_the_files(monkeypatch):
    """By default (no --workers) a job too small for worker processes has its later half, by bytes, read by one
    forked child: the job is still row for row pandas' join of the files imported one by one."""
    paths = expand_inputs([data_file(*DLRM)])
    spy = _forked_halves(monkeypatch)
    profile, _ = _joined_as_pandas_joins_the_files(paths, None)
    sizes = [p.stat().st_size for p in paths]
    assert len(spy) == 1 and spy[0] == [str(p) for p in paths[len(paths) - len(spy[0]):]]
    later = sum(sizes[len(paths) - len(spy[0]):])
    assert abs(2 * later - sum(sizes)) <= 2 * max(sizes)  # about half the bytes on either side
    assert [s["source_path"] for s in profile.meta["sources"]] == [str(p) for p in paths]


def test_only_a_default_job_of_enough_json_forks_its_later_half(monkeypatch):
    """Below FORKED_HALF_MIN_BYTES of JSON (inflated here with gzip), with --workers 1, or under --max-memory,
    the files are read in this process only."""
    paths = expand_inputs([data_file(*DLRM)])
    json_bytes = sum(len(gzip.decompress(p.read_bytes())) for p in paths)
    spy = _forked_halves(monkeypatch, json_bytes + 1)
    load_profiles_parallel(paths)
    assert spy == []
    spy = _forked_halves(monkeypatch, json_bytes)
    load_profiles_parallel(paths, workers=1)
    load_profiles_parallel(paths, max_memory="64GB")
    assert spy == []
    load_profiles_parallel(paths)
    assert len(spy) == 1


def test_a_bad_file_in_the_forked_half_fails_as_in_the_serial_parse(tmp_path, monkeypatch):
    """A truncated gzip file read by the child: the same one line, naming it, as when read in this process;
    a bad file in each half: the first one is named, as in the serial parse."""
    from dlscope.errors import InputError

    paths = []
    for i, path in enumerate(expand_inputs([data_file(*DLRM)])):
        paths.append(tmp_path / f"{i}.json.gz")
        paths[-1].write_bytes(path.read_bytes())
    for bad in ([paths[-1]], [paths[1], paths[-1]]):
        for path in bad:
            path.write_bytes(path.read_bytes()[:1000])
        failures = []
        for forked in (False, True):
            spy = _forked_halves(monkeypatch, 0 if forked else 2**62)
            with pytest.raises(InputError) as failed:
                load_profiles_parallel(paths)
            assert len(spy) == forked
            failures.append((str(failed.value.path), failed.value.problem))
        assert failures[0] == failures[1] == (str(bad[0]), "is a truncated or corrupt gzip file")


def test_a_forked_half_that_dies_names_its_first_file(monkeypatch):
    """The child killed while reading (out of memory, say): one InputError naming the first file of its half
    and how many follow it."""

    from dlscope.errors import InputError

    paths = _dying_on_the_last_file(monkeypatch)
    spy = _forked_halves(monkeypatch)
    with pytest.raises(InputError) as failed:
        load_profiles_parallel(paths)
    first = len(paths) - len(spy[0])
    assert str(failed.value.path) == str(paths[first])
    assert failed.value.problem == (f"the process importing it or one of the {len(paths) - first - 1} files after "
                                    "it ended abruptly (out of memory, killed, or the file changed while it was read)")


def _pickled_buffers(value) -> int:
    """How many buffers pickle hands out of band for ``value`` (protocol 5): its arrays, counted by pickle."""
    import pickle

    buffers: list = []
    pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(buffers)


@pytest.mark.parametrize("a_profile_first", [False, True])
def test_later_files_handed_over_as_one_block_merge_as_pandas_joins_the_files(a_profile_first):
    """The DLRM job's last 5 ranks joined into one block (as the head start's child hands them over): merged
    after the first 3 (column by column, or frame by frame when the first came back as a profile), the job is
    row for row pandas' join of the files imported one by one, each rank's meta its own; the block pickles
    in a fraction of the files' buffers."""
    from dlscope.importers import load_for_job
    from dlscope.model import FileBlock, file_block
    from dlscope.pipeline.executors import as_profile, merge

    paths = expand_inputs([data_file(*DLRM)])
    files = [load_for_job(p) for p in paths]
    block = file_block(files[3:])
    assert isinstance(block, FileBlock) and len(block.metas) == 5
    assert block.file_rows["kernels"] == [f.rows["kernels"] for f in files[3:]]
    assert _pickled_buffers(block) * 3 < _pickled_buffers(files[3:])
    first = [as_profile(files[0]), *files[1:3]] if a_profile_first else files[:3]
    profile = merge([*first, block], paths)
    expected = _concat_of_files(paths)
    _text_stays_categorical(profile)
    for name in TABLES:
        pd.testing.assert_frame_equal(_as_strings(profile.table(name)), expected[name], check_exact=True, obj=name)
    assert [s["source_path"] for s in profile.meta["sources"]] == [str(p) for p in paths]
    assert [s["rank"] for s in profile.meta["sources"]] == [_raw(p)["distributedInfo"]["rank"] for p in paths]
