"""The Nsight Systems SQLite importer, checked against independent SQL counts on every real export."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
from conftest import data_file, data_files

from dlscope.errors import InputError
from dlscope.importers.nsys import load_nsys
from dlscope.model import Profile

EXPORTS = data_files("nsys_sqlite", "*.sqlite")
each_export = pytest.mark.parametrize("path", EXPORTS, ids=[p.name for p in EXPORTS])

DLPROF = "dlprof_pytorch_emit_nvtx_rtx2070s_nsys2022.1.sqlite"
CLOVERLEAF = "pipit_cloverleaf_a100x4_nsys2024.5.sqlite"
SAXPY = "pipit_saxpy_mpi_nvtx_a100_nsys2022.2.sqlite"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"

PID, TID = 4242, 4243
GLOBAL_TID = (1 << 48) | (PID << 24) | TID


@functools.cache
def imported(path: Path) -> Profile:
    return load_nsys(path)


def export(name: str) -> Path:
    return data_file("nsys_sqlite", name)


def query(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute(sql).fetchall()


def tables(path: Path) -> set[str]:
    return {name for (name,) in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def count(path: Path, table: str, where: str = "1") -> int:
    """Rows of ``table`` (0 when the export lacks it), counted by SQLite itself."""
    return query(path, f"SELECT count(*) FROM {table} WHERE {where}")[0][0] if table in tables(path) else 0


def synthetic_export(path: Path, texts: list[str | bytes]) -> Path:
    """A minimal NVTX-only export: one push/pop range per text (bytes are stored as a BLOB), plus a range
    named through StringIds, a mark, a domain and a zero-length range."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute('CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, '
                     "globalTid INTEGER, text TEXT, textId INTEGER)")
        conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO StringIds VALUES (7, 'range by textId')")
        rows = [(100 + i, 10_000 - i, 59, GLOBAL_TID, text, None) for i, text in enumerate(texts)]
        rows += [(50, 9_000, 59, GLOBAL_TID, None, 7), (60, None, 34, GLOBAL_TID, "a mark", None),
                 (70, None, 75, GLOBAL_TID, "a domain", None), (80, 80, 59, GLOBAL_TID, "zero length", None)]
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.commit()
    return path


@each_export
def test_every_export_imports_with_its_nsys_version_in_meta(path):
    profile = imported(path)
    meta_table = "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables(path) else "EXPORT_META_DATA"
    version = query(path, f"SELECT value FROM {meta_table} WHERE name = 'EXPORT_PRODUCT_VERSION'")[0][0]
    assert profile.meta["source_format"] == "nsys"
    assert profile.meta["nsys_version"] == version
    assert (profile.meta["rank"], profile.meta["world_size"]) == (0, 1)


@each_export
def test_kernel_count_and_total_time_match_the_kernel_table(path):
    kernels = imported(path).kernels
    n, total = query(path, 'SELECT count(*), coalesce(sum("end" - start), 0) '
                           "FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert len(kernels) == n
    assert int((kernels.end - kernels.start).sum()) == total


@each_export
def test_kernels_have_names_and_the_pid_of_their_process(path):
    kernels = imported(path).kernels
    pids = {pid for (pid,) in query(path, "SELECT pid FROM PROCESSES")}
    assert (kernels.name != "").all()
    assert set(kernels.pid) <= pids


@each_export
def test_api_calls_are_the_runtime_and_driver_rows_without_backtrace_copies(path):
    # nsys files driver calls in the RUNTIME table too (eventClass 1); eventClass 67 rows are copies of calls
    # that carry a backtrace.
    api = imported(path).api_calls
    runtime = count(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass NOT IN (67, 68, 69)")
    assert len(api) == runtime + count(path, "CUPTI_ACTIVITY_KIND_DRIVER")
    assert count(path, "CUPTI_ACTIVITY_KIND_RUNTIME", "eventClass = 1") == (api.kind == "driver").sum()


@each_export
def test_api_call_names_lose_the_nsys_version_suffix(path):
    names = set(imported(path).api_calls.name)
    assert not any(name.endswith(("_v3020", "_v7000")) for name in names)
    assert "cudaLaunchKernel" in names or "cuLaunchKernel" in names


def test_backtrace_copies_are_not_counted_as_launches():
    profile = imported(export(SAXPY))
    assert (profile.api_calls.name == "cudaLaunchKernel").sum() == len(profile.kernels) == 5


@each_export
def test_memops_are_the_memcpy_and_memset_rows(path):
    memops = imported(path).memops
    copies = count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    sets = count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    assert ((memops.kind == "memcpy").sum(), (memops.kind == "memset").sum()) == (copies, sets)
    memop_tables = {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"} & tables(path)
    raw_bytes = sum(query(path, f"SELECT coalesce(sum(bytes), 0) FROM {t}")[0][0] for t in memop_tables)
    assert int(memops.bytes.sum()) == raw_bytes


def test_memcpy_direction_and_memory_kinds_come_from_the_enum_tables():
    path = export(CLOVERLEAF)
    memops = imported(path).memops
    names = Counter(memops.name)
    assert names == {"Memcpy HtoD (Pageable -> Device)": count(path, MEMCPY, "copyKind = 1"),
                     "Memcpy DtoH (Device -> Pageable)": count(path, MEMCPY, "copyKind = 2")}
    assert set(zip(memops.copy_kind, memops.src_mem, memops.dst_mem)) == {("HtoD", "pageable", "device"),
                                                                         ("DtoH", "device", "pageable")}


def test_memcpy_kinds_decode_without_enum_tables():
    path = export(DLPROF)
    assert not any(t.startswith("ENUM_") for t in tables(path))
    memops = imported(path).memops
    assert set(memops[memops.kind == "memcpy"].name) == {"Memcpy HtoD (Pageable -> Device)"}
    assert set(memops[memops.kind == "memset"].name) == {"Memset (Device)"}


@each_export
def test_syncs_are_the_synchronization_rows_with_the_thread_of_their_call(path):
    profile = imported(path)
    syncs = profile.syncs
    assert len(syncs) == count(path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    matched = syncs[syncs.tid >= 0]
    calls = profile.api_calls.set_index(["pid", "correlation"]).tid
    assert all(calls.loc[(p, c)] == t for p, c, t in zip(matched.pid, matched.correlation, matched.tid))


def test_sync_kind_follows_the_synchronizing_call():
    path = export(DLPROF)
    by_call = dict(query(path, """
        SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) JOIN StringIds s ON s.id = r.nameId
        GROUP BY 1"""))
    kinds = Counter(imported(path).syncs.kind)
    assert kinds == {"device": by_call["cudaDeviceSynchronize_v3020"],
                     "event": by_call["cudaEventSynchronize_v3020"],
                     "stream": by_call["cudaStreamSynchronize_v3020"],
                     "stream_wait_event": by_call["cudaStreamWaitEvent_v3020"]}


@each_export
def test_gpus_are_the_target_info_gpu_rows(path):
    gpus = imported(path).gpus
    raw = query(path, "SELECT name, smCount, totalMemory FROM TARGET_INFO_GPU")
    assert sorted(zip(gpus.name, gpus.sm_count, gpus.memory_bytes)) == sorted(raw)
    assert set(imported(path).kernels.device) <= set(gpus.device)
    assert (gpus.cc_major > 0).all()


def test_gpu_devices_use_the_cuda_ordinal_not_the_nsys_gpu_id():
    path = export(CLOVERLEAF)
    cuda_ordinal = dict(query(path, "SELECT cuDevice, busLocation FROM TARGET_INFO_GPU"))
    assert query(path, "SELECT count(*) FROM TARGET_INFO_GPU WHERE id != cuDevice")[0][0] > 0
    assert list(imported(path).gpus.device) == sorted(cuda_ordinal) == [0, 1, 2, 3]


@each_export
def test_every_nvtx_range_becomes_an_op_or_a_range(path):
    profile = imported(path)
    ranges = count(path, "NVTX_EVENTS", 'eventType IN (59, 60) AND "end" > start')
    assert len(profile.ops) + len(profile.ranges) == ranges
    assert (profile.ranges.domain == "nvtx").all()


def test_dlprof_dict_ranges_become_ops_with_shapes_and_dtypes():
    path = export(DLPROF)
    text = query(path, "SELECT text FROM NVTX_EVENTS WHERE text LIKE '{''mod'': ''torch.nn.functional'', "
                       "''op'': ''conv2d''%' ORDER BY start LIMIT 1")[0][0]
    args = ast.literal_eval(text)["args"]
    conv = imported(path).ops.query("name == 'torch.nn.functional.conv2d'").iloc[0]
    assert conv.op_type == "conv2d"
    assert json.loads(conv.input_shapes) == [list(a["shape"]) for a in args]
    assert json.loads(conv.input_dtypes) == [a["dtype"] for a in args] == ["float32"] * 3


def test_dlprof_ops_take_the_innermost_funcstack_as_scope():
    ops = imported(export(DLPROF)).ops.set_index("name")
    assert ops.scope.str.startswith("/<module>/").all()
    assert ops.loc["aten::addmm", "scope"].endswith("/Linear::forward/linear")
    assert ops.loc["torch.nn.functional.has_torch_function_variadic", "scope"].endswith(
        "/linear/has_torch_function_variadic")


def test_dlprof_export_splits_ops_from_scope_markers():
    profile = imported(export(DLPROF))
    assert len(profile.ops) == 54
    assert profile.ranges.name.str.contains("'funcStack'").sum() == 27
    assert '{"model_config": {"emit_nvtx": true}}' in set(profile.ranges.name)


def test_emit_nvtx_ops_keep_their_sequence_number():
    ops = imported(export(DLPROF)).ops.set_index("name")
    assert ops.loc["aten::addmm", "seq"] == 8
    assert ops.loc["aten::as_strided", "seq"] == -1
    assert (ops.direction == "").all()


@pytest.mark.parametrize("name, text", [
    ("nvfuser_h200_nvtx_nsys2025.1.sqlite", "FusionCache::get"),
    ("memfusion_tensorrt_nvtx_rtx3090x4_nsys2023.1.sqlite", "onnx::Conv_239"),
    (SAXPY, "MPI_Send"),
])
def test_non_framework_nvtx_ranges_stay_ranges(name, text):
    profile = imported(export(name))
    assert text in set(profile.ranges.name)
    assert len(profile.ops) == 0


def test_emit_nvtx_sizes_and_backward_nodes_are_parsed(tmp_path):
    profile = load_nsys(synthetic_export(tmp_path / "emit.sqlite", [
        "aten::addmm, seq = 12, op_id = 34, sizes = [[64, 128], [128, 256], []], input_op_ids = [(1, 0)]",
        "AddmmBackward0, seq = 12, op_id = 50",
        "aten::mm, sizes = [[1, 2]",
    ]))
    ops = profile.ops.set_index("name")
    assert ops.loc["aten::addmm", "input_shapes"] == "[[64,128],[128,256],[]]"
    assert (ops.loc["aten::addmm", "seq"], ops.loc["aten::addmm", "direction"]) == (12, "")
    assert (ops.loc["AddmmBackward0", "seq"], ops.loc["AddmmBackward0", "direction"]) == (12, "bwd")
    assert ops.loc["aten::mm", "input_shapes"] == ""
    assert set(profile.ranges.name) == {"range by textId"}
    assert set(profile.ops.pid) | set(profile.ranges.pid) == {PID}
    assert set(profile.ops.tid) | set(profile.ranges.tid) == {TID}


def test_hostile_nvtx_text_is_kept_as_plain_ranges(tmp_path):
    hostile = ["{" * 100_000, "{'a': " + "[" * 100_000, "{[1]: 2}",
               "{'mod': 'Tensor', 'op': 'add', 'args': 5}",
               "{'mod': 'a', 'op': 'b', 'args': [{'shape': 'x'}, 7, {'type': 'int', 'value': 3}]}",
               "aten::mm, sizes = " + "[" * 100_000, b"{\x80\xff"]
    profile = load_nsys(synthetic_export(tmp_path / "hostile.sqlite", hostile))
    assert len(profile.ops) + len(profile.ranges) == len(hostile) + 1
    ops = profile.ops.set_index("name")
    assert ops.loc["Tensor.add", "input_shapes"] == "[]"
    assert ops.loc["a.b", "input_shapes"] == "[[],[],[]]"
    assert ops.loc["a.b", "concrete_inputs"] == '["","","3"]'


def test_import_leaves_the_export_untouched(tmp_path):
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(export(DLPROF).read_bytes())
    before = hashlib.sha256(copy.read_bytes()).hexdigest()
    load_nsys(copy)
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite"]


def assert_one_line_error(path: Path, problem: str):
    with pytest.raises(InputError) as caught:
        load_nsys(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {problem}")
    assert "\n" not in message


def test_sqlite_that_is_not_an_nsys_export_is_rejected(tmp_path):
    path = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        conn.commit()
    assert_one_line_error(path, "is an SQLite database but not an Nsight Systems export")


def test_truncated_export_is_rejected(tmp_path):
    path = tmp_path / "truncated.sqlite"
    path.write_bytes(export(DLPROF).read_bytes()[:4096])
    assert_one_line_error(path, "is not a readable SQLite database (")


@each_export
def test_times_are_the_exports_integer_ns_exactly(path):
    """Kernel, API call, memcpy and NVTX start/end equal the export's own integers, row for row (nothing
    passes through float64, which cannot hold epoch ns)."""
    from collections import Counter

    profile = imported(path)

    def pairs(frame):
        return Counter(zip(frame["start"].tolist(), frame["end"].tolist()))

    have = tables(path)
    raw = {name: Counter(query(path, f'SELECT start, "end" FROM {table}')) if table in have else Counter()
           for name, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", MEMCPY))}
    assert pairs(profile.kernels) == raw["kernels"]
    assert pairs(profile.memops[profile.memops["kind"] == "memcpy"]) == raw["memcpy"]
    api = Counter()
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if table in have:
            api += Counter(query(path, f'SELECT start, "end" FROM {table}'))
    assert not pairs(profile.api_calls) - api  # backtrace copies are dropped, nothing is moved
    nvtx = Counter(query(path, 'SELECT start, "end" FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND "end" > start')
                   if "NVTX_EVENTS" in have else [])
    assert pairs(profile.ops) + pairs(profile.ranges) == nvtx
