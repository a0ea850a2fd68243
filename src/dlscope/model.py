"""The normalized profile model: the one shape every importer produces and every analysis reads.

A :class:`Profile` is a set of pandas DataFrames with fixed columns (``TABLES`` below). All times are
integer nanoseconds on the trace's own clock. Missing integers are ``-1``, missing strings ``""`` and missing
floats (the few figures a trace records as fractions) NaN, so the tables stay plain int64, float64 and
categorical columns without masks. The row references, depths and iteration numbers the analysis adds are int32
where every value fits (:func:`narrow_ints`); the database holds the same integers either way.

Text columns (names, kinds, shapes) are categorical: each distinct string is held once, and each row holds an
integer code (a kernel name is ~240 bytes, repeated on every launch). Every frame that copies rows later copies
the codes. The categories are sorted, so a sort or a group-by on such a column orders rows as the strings would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:  # pandas loads where a frame is first made: a job's forked parse never needs it (TableColumns)
    import pandas as pd

I = "int64"  # noqa: E741 - one-letter dtype names keep the table specs below readable
F = "float64"
S = "category"  # text: one string per distinct value, an integer code per row (:func:`text_column`)

#: Column name -> dtype for each raw table. Importers fill what they can; everything else keeps the
#: missing value. Analyses add derived tables (iterations, op/kernel attribution) on top.
TABLES: dict[str, dict[str, str]] = {
    # A framework operation on the CPU: a PyTorch cpu_op, a TF op, or an NVTX range that stands for one
    # (PyTorch emit_nvtx / DLProf ranges).
    "ops": {
        "op_id": I, "rank": I, "pid": I, "tid": I, "name": S, "op_type": S,
        "start": I, "end": I,
        "external_id": I,       # Kineto "External id"; -1 elsewhere
        "seq": I,               # autograd sequence number; -1 when absent
        "direction": S,         # "fwd", "bwd" or ""
        "input_shapes": S,      # JSON list of shapes, e.g. "[[32,3,224,224],[64,3,7,7],[]]"; "" when unknown
        "input_dtypes": S,      # JSON list of dtype strings aligned with input_shapes; "" when unknown
        "concrete_inputs": S,   # JSON list of scalar argument values as the trace recorded them; ""
        "scope": S,             # module / name-scope path when the trace carries one, "/"-separated; ""
        # "" for a framework op; the domain ("user_annotation", "nvtx") of an annotation range that launched
        # GPU work outside any op and so stands for one (it owns those launches, never other ops)
        "range_domain": S,
        # the innermost user Python frame the op was called from, "file.py:123", when the trace recorded
        # Python stacks (the legacy ``Call stack`` arg, or the python_function frames enclosing it); ""
        "stack": S,
    },
    # Annotation ranges that are not ops: ProfilerStep#N, user annotations, NVTX ranges, data loading,
    # gpu_user_annotation (device >= 0 for ranges drawn on a GPU lane).
    "ranges": {
        "range_id": I, "rank": I, "pid": I, "tid": I, "device": I, "name": S,
        "domain": S,            # "user_annotation", "gpu_user_annotation", "nvtx", "python_function", ...
        "start": I, "end": I,
    },
    # CUDA runtime / driver API calls on CPU threads.
    "api_calls": {
        "api_id": I, "rank": I, "pid": I, "tid": I, "name": S,
        "kind": S,              # "runtime" or "driver"
        "start": I, "end": I, "correlation": I,
    },
    # Kernel executions on a GPU.
    "kernels": {
        "kernel_id": I, "rank": I, "pid": I, "device": I, "stream": I, "name": S,
        "start": I, "end": I, "correlation": I,
        "grid_x": I, "grid_y": I, "grid_z": I, "block_x": I, "block_y": I, "block_z": I,
        "registers": I,         # registers per thread
        "shared_mem": I,        # bytes of shared memory (static + dynamic)
        # As Kineto records them (CUPTI's occupancy calculator): grid blocks / SMs, that times the block's
        # warps, and the estimated achieved occupancy in percent; NaN / -1 when the trace does not say
        "blocks_per_sm": F, "warps_per_sm": F, "est_occupancy_pct": I,
    },
    # memcpy and memset on a GPU.
    "memops": {
        "memop_id": I, "rank": I, "pid": I, "device": I, "stream": I,
        "kind": S,              # "memcpy" or "memset"
        "name": S,              # e.g. "Memcpy HtoD (Pageable -> Device)"
        "copy_kind": S,         # "HtoD", "DtoH", "DtoD", "HtoH", "PtoP" or "" (memset)
        "src_mem": S, "dst_mem": S,  # "pageable", "pinned", "device", "managed", "array" or ""
        "start": I, "end": I, "bytes": I, "correlation": I,
    },
    # Synchronizations: device / stream / event synchronize and stream-wait-event.
    "syncs": {
        "sync_id": I, "rank": I, "pid": I, "tid": I, "device": I, "stream": I,
        "kind": S,              # "device", "stream", "event", "stream_wait_event", "context" or "unknown"
        "start": I, "end": I, "correlation": I,
    },
    # Memory allocator samples (Kineto [memory] instant events), for peak-memory questions: one per allocation
    # (bytes_delta > 0) or free (< 0) of block ``addr``, with the allocator's totals after it; device -1 is the
    # CPU allocator. pid/tid: the thread that allocated (its op is the one running then).
    "memory": {
        "rank": I, "device": I, "ts": I, "bytes_delta": I, "total_allocated": I, "total_reserved": I,
        "pid": I, "tid": I, "addr": I,
    },
    # Collective metadata Kineto records on record_param_comms ops (kind "op") and on NCCL kernels (kind
    # "kernel"): message sizes, group, process group. Keyed to its op by (rank, pid, tid, start, name) and to
    # its kernel by (rank, device, stream, start); the per-rank figures and the collectives table read it.
    "comm_args": {
        "rank": I, "kind": S, "pid": I, "tid": I, "device": I, "stream": I, "name": S, "start": I, "end": I,
        "collective": S,        # e.g. "allreduce", as the trace names it; ""
        "in_nelems": I, "out_nelems": I, "group_size": I,
        "dtype": S, "pg_name": S,
        "pg_ranks": S,          # the process group's ranks as the trace lists them; ""
    },
    # Python frames (Kineto python_function events, with_stack=True; or a cProfile output): one call of a
    # Python function on a CPU thread. name as recorded ("path/file.py(123): func" or "<built-in method ...>"),
    # parsed into file, line (-1 for built-ins) and function. python_id / python_parent_id: Kineto's ids
    # (-1 when absent); the analysis links each frame to its parent frame (``parent_id``, ``depth``).
    "python_frames": {
        "frame_id": I, "rank": I, "pid": I, "tid": I, "name": S, "file": S, "line": I, "function": S,
        "start": I, "end": I, "python_id": I, "python_parent_id": I,
    },
    # One row per GPU seen (per rank).
    "gpus": {
        "rank": I, "device": I, "name": S, "sm_count": I, "memory_bytes": I,
        "cc_major": I, "cc_minor": I,
    },
}

#: The Python call tree's columns (``python_tree``: frames merged by call path, per thread), as the analysis
#: builds it from a trace's frames and the cProfile importer from a cProfile output.
PYTHON_TREE_COLUMNS = ["rank", "node_id", "parent_node_id", "pid", "tid", "depth", "name", "file", "line",
                       "function", "calls", "total_ns", "self_ns"]

#: Each table's row id column (ids are row numbers once analysed).
ID_COLUMNS = {"ops": "op_id", "ranges": "range_id", "api_calls": "api_id", "kernels": "kernel_id",
              "memops": "memop_id", "syncs": "sync_id", "python_frames": "frame_id"}
#: Columns that refer to rows: table -> {column: the table whose ids it holds ("nodes": op nodes)}. The
#: analysis adds all but the id columns; a job imported rank by rank shifts them all by the rows before.
REFERENCES = {
    "ops": {"op_id": "ops", "parent_id": "ops", "root_id": "ops", "node_id": "nodes", "parent_node_id": "nodes",
            "frame_id": "python_frames"},
    "ranges": {"range_id": "ranges"},
    "api_calls": {"api_id": "api_calls", "op_id": "ops"},
    "kernels": {"kernel_id": "kernels", "api_id": "api_calls", "op_id": "ops", "root_op_id": "ops"},
    "memops": {"memop_id": "memops", "api_id": "api_calls", "op_id": "ops", "root_op_id": "ops"},
    "syncs": {"sync_id": "syncs", "api_id": "api_calls", "op_id": "ops", "root_op_id": "ops"},
    "python_frames": {"frame_id": "python_frames", "parent_id": "python_frames"},
}

MISSING_INT = -1
MISSING_STR = ""
MISSING = {I: MISSING_INT, F: np.nan, S: MISSING_STR}


_INT32 = np.iinfo(np.int32)


def narrow_ints(values: np.ndarray) -> np.ndarray:
    """Row references, depths and iteration numbers the analysis adds (-1: none) as int32 when every value fits,
    else as given (int64): half the bytes of each such column for as long as the import holds the tables.
    Readers take them ``to_numpy(np.int64)`` before any arithmetic that could pass 2^31 (packed keys, sums);
    times, durations and counts stay int64."""
    values = np.asarray(values)
    if values.dtype == np.int32 or values.dtype.kind not in "iu":
        return values
    if len(values) and (int(values.min()) < _INT32.min or int(values.max()) > _INT32.max):
        return values
    return values.astype(np.int32)


def put_column(frame: pd.DataFrame, name: str, values: Any) -> None:
    """``frame[name] = values`` without the copy pandas makes of a bare array (the new column is ``values``
    itself: one array alive, not two, while the analysis adds its columns)."""
    import pandas as pd

    if isinstance(values, np.ndarray) and values.ndim == 1 and len(values) == len(frame) and values.flags.writeable:
        values = pd.Series(values, index=frame.index, copy=False)  # (a read-only view is copied: pandas writes)
    frame[name] = values


def empty_table(name: str) -> pd.DataFrame:
    return make_table(name, {}, 0)


@lru_cache(maxsize=1)
def _string_dtype() -> Any:
    """pandas' default dtype for a column of Python strings: ``str`` (Arrow-backed) in pandas 3, object before."""
    import pandas as pd

    return pd.Series(np.array([""], dtype=object)).dtype


def string_column(values: Any, n: int | None = None) -> Any:
    """A column of strings in pandas' default string dtype, built without a per-row Python pass.

    Assigning an object array to a DataFrame makes pandas 3 convert it element by element (~90 ns a
    string); building the Arrow array directly costs a third of that. Under pandas 2 this is the object
    array itself. Values that are not all strings (or missing) keep pandas' own conversion.
    """
    import pandas as pd

    if _string_dtype() == np.dtype(object) or (isinstance(values, np.ndarray) and values.dtype != object):
        return _object_array(values, n)
    if isinstance(values, (pd.Series, pd.Index)):
        values = values.to_numpy(dtype=object)
    try:
        return pd.array(pa.array(values, type=pa.large_string(), from_pandas=True), dtype=_string_dtype())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return _object_array(values, n)


def words_column(codes: np.ndarray, words: list[str]) -> Any:
    """``string_column(words[codes])`` without a string object per row: Arrow takes the words by code."""
    import pandas as pd

    if _string_dtype() == np.dtype(object):
        return string_column(np.asarray(words, dtype=object)[codes])
    return pd.array(pa.array(words, type=pa.large_string()).take(pa.array(codes)), dtype=_string_dtype())


def text_column(values: Any, n: int | None = None) -> pd.Categorical:
    """A text column of a table (dtype :data:`S`): the distinct strings once, sorted, and an integer code per
    row, encoded by Arrow without a per-row Python pass. ``values``: strings (``None`` is missing).

    The missing value "" is always a category, so a frame that gains missing rows (a left merge, a reindex)
    can ``fillna("")`` them as it would a column of strings."""
    import pandas as pd

    if isinstance(values, pd.Categorical) or isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        return _sorted_categories(pd.Categorical(values))
    if isinstance(values, (pd.Series, pd.Index)):
        values = values.to_numpy(dtype=object)
    if isinstance(values, pa.ChunkedArray):  # an Arrow column (a job's ranks joined, a trace's batches)
        values = (values.unify_dictionaries() if pa.types.is_dictionary(values.type) else values).combine_chunks()
    try:
        if isinstance(values, pa.DictionaryArray):  # already encoded (an importer's batches): words stay words
            encoded = values.cast(pa.dictionary(values.type.index_type, pa.large_string()))
        else:
            encoded = (values.cast(pa.large_string()) if isinstance(values, pa.Array)
                       else pa.array(values, type=pa.large_string(), from_pandas=True)).dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # not all strings: pandas' own encoding
        return _sorted_categories(pd.Categorical(_object_array(values, n)))
    words = encoded.dictionary
    if not pc.any(pc.equal(words, MISSING_STR)).as_py():
        words = pa.concat_arrays([words, pa.array([MISSING_STR], type=pa.large_string())])
    order = pc.array_sort_indices(words).to_numpy()
    rank = np.empty(len(order), dtype=np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    codes = rank[encoded.indices.fill_null(0).to_numpy()]
    if encoded.null_count:
        codes[encoded.indices.is_null().to_numpy(zero_copy_only=False)] = -1
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(_text_index(words.take(pa.array(order)))))


def _text_index(words: pa.Array) -> pd.Index:
    """Categories as Python strings: a column turned into an object array (``np.asarray``, ``to_numpy``) then
    points at these, 8 bytes a row, instead of making a string object per row."""
    import pandas as pd

    return pd.Index(words.to_numpy(zero_copy_only=False), dtype=object)


def filled_text(column: Any) -> pd.Categorical:
    """A text column (:func:`text_column`) with its missing values as ""."""
    return text_column(column).fillna(MISSING_STR)


def _sorted_categories(column: pd.Categorical) -> pd.Categorical:
    """Categories as Python strings in sorted order, "" among them, so that codes order rows as their
    strings do."""
    import pandas as pd

    words = list(column.categories)
    if MISSING_STR not in words:
        words.append(MISSING_STR)
    try:
        words.sort()
    except TypeError:  # mixed types cannot be sorted; their order is pandas'
        pass
    if column.categories.dtype == object and list(column.categories) == words:
        return column
    return column.set_categories(pd.Index(words, dtype=object))


def union_text(columns: list[pd.Series]) -> pd.Categorical:
    """Text columns of several tables (e.g. one per rank) as one, still one string per distinct value."""
    from pandas.api.types import union_categoricals

    return _sorted_categories(union_categoricals([text_column(c) for c in columns], sort_categories=True))


def value_counts(column: pd.Series, sort: bool = True) -> pd.Series:
    """How many rows hold each value of a column, as pandas counts strings: only the values present, in
    order of first appearance (with ``sort``, most frequent first, ties in that order). pandas counts a
    categorical's unused categories too and orders ties by category."""
    import pandas as pd

    codes, uniques = pd.factorize(column, sort=False)
    counts = np.bincount(codes[codes >= 0], minlength=len(uniques))
    order = np.argsort(-counts, kind="stable") if sort else np.arange(len(uniques))
    return pd.Series(counts[order], index=pd.Index(np.asarray(uniques, dtype=object)[order], name=column.name),
                     name="count")


def concat_tables(name: str, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of several frames of table ``name``, its text columns still categorical (pandas would make a
    text column whose categories differ between the frames plain strings)."""
    import pandas as pd

    frame = pd.concat(frames, ignore_index=True) if frames else empty_table(name)
    for col, dtype in TABLES[name].items():
        if dtype == S and len(frames) > 1 and not isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = union_text([f[col] for f in frames])
    return frame


def _object_array(values: Any, n: int | None) -> np.ndarray:
    n = len(values) if n is None else n
    arr = np.empty(n, dtype=object)
    arr[:] = list(values) if not isinstance(values, np.ndarray) else values
    return arr


def make_table(name: str, columns: Mapping[str, Any], n: int | None = None) -> pd.DataFrame:
    """Build a table from whatever columns an importer has, filling the rest with missing values.

    ``columns`` maps column names to sequences/arrays of equal length; unknown names are an error so a
    typo in an importer fails loudly instead of silently dropping data.
    """
    import pandas as pd

    spec = TABLES[name]
    unknown = set(columns) - set(spec)
    if unknown:
        raise KeyError(f"{name}: unknown columns {sorted(unknown)}")
    if n is None:
        n = len(next(iter(columns.values()))) if columns else 0
    data = {}
    for col, dtype in spec.items():
        if col in columns:
            values = columns[col]
            data[col] = (np.asarray(values, dtype=np.int64) if dtype == I else
                         np.asarray(values, dtype=np.float64) if dtype == F else text_column(values, n))
        elif dtype == I:
            data[col] = np.full(n, MISSING_INT, dtype=np.int64)
        elif dtype == F:
            data[col] = np.full(n, np.nan)
        else:
            data[col] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8),
                                                  dtype=pd.CategoricalDtype(_text_index(pa.array([MISSING_STR]))))
    return pd.DataFrame(data, copy=False)


@dataclass
class Profile:
    """Everything one import produced, before analysis.

    ``meta`` holds scalar facts about the source: ``source_format`` ("kineto" / "nsys"), ``source_path``,
    ``rank``, ``world_size``, ``hostname``, ``trace_start_ns`` and free-form extras.
    """

    ops: pd.DataFrame = field(default_factory=lambda: empty_table("ops"))
    ranges: pd.DataFrame = field(default_factory=lambda: empty_table("ranges"))
    api_calls: pd.DataFrame = field(default_factory=lambda: empty_table("api_calls"))
    kernels: pd.DataFrame = field(default_factory=lambda: empty_table("kernels"))
    memops: pd.DataFrame = field(default_factory=lambda: empty_table("memops"))
    syncs: pd.DataFrame = field(default_factory=lambda: empty_table("syncs"))
    memory: pd.DataFrame = field(default_factory=lambda: empty_table("memory"))
    comm_args: pd.DataFrame = field(default_factory=lambda: empty_table("comm_args"))
    python_frames: pd.DataFrame = field(default_factory=lambda: empty_table("python_frames"))
    gpus: pd.DataFrame = field(default_factory=lambda: empty_table("gpus"))
    meta: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)

    @classmethod
    def concat(cls, profiles: list[Profile]) -> Profile:
        """Merge several imports (e.g. one per rank) into one, renumbering ids so they stay unique."""
        if len(profiles) == 1:
            return profiles[0]
        out = cls()
        for name in TABLES:
            frame = concat_tables(name, [p.table(name) for p in profiles])
            if name in ID_COLUMNS:
                frame[ID_COLUMNS[name]] = np.arange(len(frame), dtype=np.int64)
            setattr(out, name, frame)
        out.meta = {"sources": [p.meta for p in profiles]}
        return out


@dataclass
class TableColumns:
    """One file's tables as plain column arrays (numpy; text as Arrow dictionary arrays), before any DataFrame:
    a job's files are joined column by column and each table made once (:func:`joined_tables`), instead of ten
    DataFrames built, validated and concatenated per file. ``rows``: each table's row count."""

    columns: dict[str, dict[str, Any]]
    rows: dict[str, int]
    meta: dict[str, Any] = field(default_factory=dict)

    def profile(self) -> Profile:
        """The file's own profile, as the importer makes it."""
        profile = Profile(**{name: make_table(name, self.columns.get(name, {}), self.rows.get(name, 0))
                             for name in TABLES})
        profile.meta = self.meta
        return profile


@dataclass
class FileBlock(TableColumns):
    """Consecutive files of a job joined column by column (:func:`file_block`): one array per table and column
    (text: one dictionary array, its words the union of the files'), so that a forked child hands them over as a
    few dozen buffers, not one per file and column. ``rows``: each table's rows in all; ``file_rows``: each
    file's; ``metas``: each file's meta. A job joins it as it joins a file (:func:`joined_tables`)."""

    file_rows: dict[str, list[int]] = field(default_factory=dict)
    metas: list[dict[str, Any]] = field(default_factory=list)


def file_block(files: list[TableColumns]) -> FileBlock | None:
    """The files as one :class:`FileBlock`; None when a text column holds values that are not all strings (the
    files are then handed over as they are). A column no file has stays missing (filled where it is joined)."""
    columns = _joined_columns(files, block=True)
    if columns is None:
        return None
    rows = {name: [f.rows.get(name, 0) for f in files] for name in TABLES}
    return FileBlock(columns, {name: sum(n) for name, n in rows.items()}, file_rows=rows,
                     metas=[f.meta for f in files])


def joined_tables(files: list[TableColumns]) -> dict[str, pd.DataFrame] | None:
    """The files' tables (a :class:`FileBlock` among them counts as its files), each joined column by column in
    file order and made once, with the dtypes and categories :func:`concat_tables` gives the files' own tables
    (text: the sorted union of their words, "" among them); None when a text column holds values that are not
    all strings (joined frame by frame then)."""
    columns = _joined_columns(files, block=False)
    if columns is None:
        return None
    return {name: make_table(name, columns[name], sum(f.rows.get(name, 0) for f in files)) for name in TABLES}


def _joined_columns(files: list[TableColumns], block: bool) -> dict[str, dict[str, Any]] | None:
    """Each table's columns joined in file order: numbers as one array of the table's dtype, text as the files'
    dictionary batches (``block``: unified into one dictionary array, and a column no file has left out)."""
    tables: dict[str, dict[str, Any]] = {}
    for name, spec in TABLES.items():
        rows = [f.rows.get(name, 0) for f in files]
        columns: dict[str, Any] = {}
        for col, dtype in spec.items():
            parts = [f.columns.get(name, {}).get(col) for f in files]
            if block and all(part is None for part in parts):
                continue
            if dtype == S:
                chunks = _dictionary_chunks(parts, rows)
                if chunks is None:
                    return None
                text = pa.chunked_array(chunks, type=_WORDS)
                columns[col] = text.unify_dictionaries().combine_chunks() if block else text
            else:
                kind = np.int64 if dtype == I else np.float64
                missing = MISSING_INT if dtype == I else np.nan
                columns[col] = np.concatenate([np.full(n, missing, dtype=kind) if part is None else
                                               np.asarray(part, dtype=kind) for part, n in zip(parts, rows)])
        tables[name] = columns
    return tables


#: the type of a text column's batches (:func:`dlscope.importers.kineto.columns._encoded`)
_WORDS = pa.dictionary(pa.int32(), pa.large_string())


def _dictionary_chunks(parts: list[Any], rows: list[int]) -> list[pa.DictionaryArray] | None:
    """Each file's text column as Arrow dictionary batches (a missing column: "" on every row); None when
    one holds values that are not strings."""
    chunks = []
    for part, n in zip(parts, rows):
        if part is None:
            chunks.append(pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32),
                                                         pa.array([MISSING_STR], type=pa.large_string())))
            continue
        if isinstance(part, pa.ChunkedArray):
            found = part.chunks
        elif isinstance(part, pa.DictionaryArray):
            found = [part]
        else:
            try:
                found = [pa.array(part, type=pa.large_string(), from_pandas=True).dictionary_encode()]
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return None
        if any(not chunk.type.equals(_WORDS) for chunk in found):
            return None
        chunks.extend(found)
    return chunks
