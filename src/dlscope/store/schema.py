"""The profile database schema: one SQLite file, documented in docs/schema.md.

Raw normalized tables hold every event with the analysis' attribution columns; ``agg_*`` tables hold one
aggregation's summaries (several aggregations may live in one file, keyed by ``agg_id``). Every sort and
filter the viewer offers has an index.
"""

from __future__ import annotations

SCHEMA_VERSION = 3

#: 16 KiB pages: the bulk ingest and index builds of a 1M-event trace take ~15% less time than with 4 KiB
PAGE_SIZE = 16384

DDL = """
CREATE TABLE dlscope_meta (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE sources (
    source_id INTEGER PRIMARY KEY, path TEXT, format TEXT, rank INTEGER, world_size INTEGER,
    hostname TEXT, meta_json TEXT
);

CREATE TABLE gpus (
    rank INTEGER, device INTEGER, name TEXT, sm_count INTEGER, memory_bytes INTEGER,
    cc_major INTEGER, cc_minor INTEGER, PRIMARY KEY (rank, device)
);

CREATE TABLE iterations (
    rank INTEGER, iteration INTEGER, name TEXT, start INTEGER, cpu_end INTEGER, "end" INTEGER,
    PRIMARY KEY (rank, iteration)
);

-- A node: the calls of an op with the same name, type, direction, scope and input shapes at the same level.
-- Nodes with parent_node_id = -1 are op nodes (the outermost ops, where the user wrote them: DLProf's "op");
-- the others are the ops nested in them, kept for drill-down. Strings live here once; each call is a row of
-- op_instances. The view `ops` joins them back.
CREATE TABLE op_nodes (
    node_id INTEGER PRIMARY KEY, rank INTEGER, name TEXT, op_type TEXT, direction TEXT, scope TEXT,
    input_shapes TEXT, input_dtypes TEXT, concrete_inputs TEXT, data_type TEXT, tc_eligible INTEGER,
    parent_node_id INTEGER, range_domain TEXT, stack TEXT
);

-- One call of an op. Its GPU figures include everything launched beneath it (its nested ops' too).
CREATE TABLE op_instances (
    op_id INTEGER PRIMARY KEY, node_id INTEGER, rank INTEGER, pid INTEGER, tid INTEGER, start INTEGER,
    "end" INTEGER, dur INTEGER, parent_id INTEGER, root_id INTEGER, depth INTEGER, external_id INTEGER,
    seq INTEGER, iteration INTEGER, using_tc INTEGER, kernel_count INTEGER, tc_kernel_count INTEGER,
    kernel_time INTEGER, gpu_time INTEGER, tc_gpu_time INTEGER, api_time INTEGER, gpu_idle INTEGER,
    frame_id INTEGER
);

CREATE VIEW ops AS
SELECT i.op_id, i.rank, i.pid, i.tid, n.name, n.op_type, i.start, i."end", i.dur, i.parent_id, i.root_id,
       i.depth, i.external_id, i.seq, n.direction, n.input_shapes, n.input_dtypes, n.concrete_inputs, n.scope,
       n.data_type, i.iteration, i.node_id, n.parent_node_id, n.range_domain, n.tc_eligible, i.using_tc,
       i.kernel_count, i.tc_kernel_count, i.kernel_time, i.gpu_time, i.tc_gpu_time, i.api_time, i.gpu_idle,
       n.stack, i.frame_id
FROM op_instances i JOIN op_nodes n ON n.node_id = i.node_id;

CREATE TABLE ranges (
    range_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, tid INTEGER, device INTEGER, name TEXT,
    domain TEXT, start INTEGER, "end" INTEGER, category TEXT, iteration INTEGER
);

-- One call of a Python function on a CPU thread (Kineto python_function frames, with_stack=True; or a cProfile
-- output's call tree). name as recorded, parsed into file, line (-1: a built-in) and function; parent_id: the
-- frame it was called from (-1: the thread's outermost), by the trace's Python ids, else by time on the thread;
-- node_id: its node in python_tree (unique per rank). Bounded at import (sources' meta_json "python_frames").
CREATE TABLE python_frames (
    frame_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, tid INTEGER, name TEXT, file TEXT, line INTEGER,
    function TEXT, start INTEGER, "end" INTEGER, python_id INTEGER, python_parent_id INTEGER, parent_id INTEGER,
    depth INTEGER, node_id INTEGER
);

-- The Python call tree per thread, frames merged by call path (a flame graph's boxes): total_ns = the sum of its
-- frames' durations, self_ns = total_ns less its children's, calls = its frames. Keyed by (rank, node_id).
-- An op's frame is op_instances.frame_id (the innermost frame enclosing its start on its thread).
CREATE TABLE python_tree (
    rank INTEGER, node_id INTEGER, parent_node_id INTEGER, pid INTEGER, tid INTEGER, depth INTEGER, name TEXT,
    file TEXT, line INTEGER, function TEXT, calls INTEGER, total_ns INTEGER, self_ns INTEGER,
    PRIMARY KEY (rank, node_id)
);

CREATE TABLE api_calls (
    api_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, tid INTEGER, name TEXT, kind TEXT,
    start INTEGER, "end" INTEGER, correlation INTEGER, op_id INTEGER, iteration INTEGER
);

-- One kernel launch. blocks_per_sm, warps_per_sm, est_occupancy_pct: as Kineto recorded them (grid blocks / SMs,
-- that times the block's warps, CUPTI's occupancy estimate), NULL / -1 when the trace does not say.
-- active_blocks_per_sm (blocks an SM holds at once, from block size, registers and shared memory against the
-- compute capability's limits), waves, last_wave_fill and occupancy (theoretical): dlscope's, see docs/metrics.md.
CREATE TABLE kernels (
    kernel_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, device INTEGER, stream INTEGER, name TEXT,
    start INTEGER, "end" INTEGER, dur INTEGER, correlation INTEGER,
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,
    registers INTEGER, shared_mem INTEGER, blocks_per_sm REAL, warps_per_sm REAL, est_occupancy_pct INTEGER,
    uses_tc INTEGER, api_id INTEGER, launch_ts INTEGER, op_id INTEGER, root_op_id INTEGER, iteration INTEGER,
    active_blocks_per_sm INTEGER, waves REAL, last_wave_fill REAL, occupancy REAL
);

CREATE TABLE memops (
    memop_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, device INTEGER, stream INTEGER, kind TEXT,
    name TEXT, copy_kind TEXT, src_mem TEXT, dst_mem TEXT, start INTEGER, "end" INTEGER, dur INTEGER,
    bytes INTEGER, correlation INTEGER, api_id INTEGER, launch_ts INTEGER, op_id INTEGER, root_op_id INTEGER,
    iteration INTEGER
);

CREATE TABLE syncs (
    sync_id INTEGER PRIMARY KEY, rank INTEGER, pid INTEGER, tid INTEGER, device INTEGER, stream INTEGER,
    kind TEXT, start INTEGER, "end" INTEGER, correlation INTEGER, api_id INTEGER, launch_ts INTEGER, op_id INTEGER,
    root_op_id INTEGER, iteration INTEGER
);

-- One allocator sample: an allocation (bytes_delta > 0) or free (< 0) of block addr on device (-1: the CPU
-- allocator), with the allocator's totals after it (-1 when the trace has only deltas); pid/tid: the thread that
-- allocated. Databases written before pid, tid and addr existed lack those columns.
CREATE TABLE memory (
    rank INTEGER, device INTEGER, ts INTEGER, bytes_delta INTEGER, total_allocated INTEGER,
    total_reserved INTEGER, pid INTEGER, tid INTEGER, addr INTEGER
);

-- The Timeline view's arrays of one rank (analyze/timeline.py), computed at import so that the viewer reads a
-- rank of millions of events as a few blobs instead of turning each row into a Python tuple: name 'format' and
-- 'lanes' (JSON), else one numpy array in .npy format (e.g. 'kernel.start': the rank's kernel starts, sorted).
-- A database without these rows (written before) is read from its event tables, with the same result.
CREATE TABLE timeline_arrays (
    rank INTEGER, name TEXT, data BLOB, PRIMARY KEY (rank, name)
);

-- Collective metadata of record_param_comms ops (kind 'op') and NCCL kernels (kind 'kernel') as Kineto records
-- it; keyed to the op by (rank, pid, tid, start, name), to the kernel by (rank, device, stream, start).
CREATE TABLE comm_args (
    rank INTEGER, kind TEXT, pid INTEGER, tid INTEGER, device INTEGER, stream INTEGER, name TEXT,
    start INTEGER, "end" INTEGER, collective TEXT, in_nelems INTEGER, out_nelems INTEGER, group_size INTEGER,
    dtype TEXT, pg_name TEXT, pg_ranks TEXT
);

-- run_id: the first agg_id of the aggregations written together (one per rank of an import or `aggregate`)
-- reader_cost_ns: time inside data loading (DataLoader __next__), NULL when the trace shows none.
-- model_flops: the matrix-product FLOPs of the profiled iterations' ops (docs/metrics.md, "MFU"), NULL when no op
-- recorded shapes; mfu = achieved_flops_per_s (model FLOPs / wall clock) / peak_flops_per_s (the GPU's dense peak
-- at mfu_precision), NULL when that peak is unknown.
-- gpu_timing_tolerance: the iteration_variance rule's tolerance in force when the aggregation was made (its
-- --rules-config, else data/rules.json): where the GPU ran behind the CPU by more than this share of the median
-- window, the iterations are timed on the GPU, by the rule and the summary alike; NULL in databases written before.
CREATE TABLE aggregations (
    agg_id INTEGER PRIMARY KEY, run_id INTEGER, created_at TEXT, rank INTEGER, iter_start INTEGER, iter_stop INTEGER,
    key_node TEXT, iteration_method TEXT, iterations_profiled INTEGER, window_start INTEGER,
    window_end INTEGER, wall_clock_ns INTEGER, avg_iteration_ns INTEGER, gpu_busy_ns INTEGER,
    gpu_utilization REAL, kernel_count INTEGER, kernel_time_ns INTEGER, tc_kernel_time_ns INTEGER,
    tc_eligible_kernel_time_ns INTEGER, tc_kernel_efficiency REAL, memory_ns INTEGER,
    tensor_core_ns INTEGER, non_tensor_core_ns INTEGER, dataloader_ns INTEGER, io_ns INTEGER,
    cpu_ns INTEGER, other_ns INTEGER, op_count INTEGER, op_nodes INTEGER, tc_eligible_op_nodes INTEGER,
    op_nodes_using_tc INTEGER, tc_eligible_gpu_time_pct REAL, reader_cost_ns INTEGER, model_flops INTEGER,
    model_flops_per_iteration INTEGER, achieved_flops_per_s REAL, peak_flops_per_s REAL, mfu_precision TEXT, mfu REAL,
    findings_combined_saving_ns INTEGER, critical_path_note TEXT, gpu_timing_tolerance REAL
);

CREATE TABLE agg_gpus (
    agg_id INTEGER, rank INTEGER, device INTEGER, busy_ns INTEGER, utilization REAL,
    kernel_count INTEGER, kernel_time_ns INTEGER, tc_kernel_time_ns INTEGER, memory_ns INTEGER,
    PRIMARY KEY (agg_id, rank, device)
);

-- reader_cost_ns: the time the step waited for its batch: all of its window inside data loading (the whole
-- DataLoader __next__, whatever the GPU does meanwhile), NULL when the trace shows no data loading.
CREATE TABLE agg_iterations (
    agg_id INTEGER, rank INTEGER, iteration INTEGER, profiled INTEGER, start INTEGER, "end" INTEGER,
    duration_ns INTEGER, kernel_count INTEGER, tc_kernel_count INTEGER, kernel_time_ns INTEGER,
    tc_kernel_time_ns INTEGER, gpu_busy_ns INTEGER, tensor_core_ns INTEGER, non_tensor_core_ns INTEGER,
    memory_ns INTEGER, dataloader_ns INTEGER, io_ns INTEGER, cpu_ns INTEGER, other_ns INTEGER,
    reader_cost_ns INTEGER, PRIMARY KEY (agg_id, rank, iteration)
);

-- One row per op node (the outermost ops) with its calls summed; each call's GPU figures include everything
-- launched beneath it. gpu_time_ns = kernel and memory-operation time; kernels: its kernels by GPU time;
-- model_flops (its calls' matrix-product FLOPs) and mfu (model_flops / gpu_time_ns against the dense peak);
-- stack: the innermost user Python frame (file:line) of its first call, '' when no Python stack was recorded;
-- output_shape: a convolution's output shape (JSON) where the trace recorded no stride or padding and its
-- backward's gradient told it (roofline.completion), NULL elsewhere; roofline_flops, roofline_bytes,
-- roofline_precision, roofline_family: for an op node without a model of its own (an autograd node, a custom
-- op), the roofline's cost of the modelled ops beneath it summed over its calls (roofline.nested), NULL elsewhere.
CREATE TABLE agg_ops (
    agg_id INTEGER, node_id INTEGER, rank INTEGER, op_name TEXT, op_type TEXT, direction TEXT,
    scope TEXT, input_shapes TEXT, data_type TEXT, calls INTEGER, kernel_count INTEGER,
    tc_kernel_count INTEGER, kernel_time_ns INTEGER, gpu_time_ns INTEGER, tc_gpu_time_ns INTEGER,
    cpu_time_ns INTEGER, api_time_ns INTEGER, cpu_overhead_ns INTEGER, gpu_idle_ns INTEGER,
    tc_eligible INTEGER, using_tc INTEGER, kernels TEXT, model_flops INTEGER, mfu REAL, critical_path_ns INTEGER,
    stack TEXT, output_shape TEXT, roofline_flops INTEGER, roofline_bytes INTEGER, roofline_precision TEXT,
    roofline_family TEXT, PRIMARY KEY (agg_id, node_id)
);

CREATE TABLE agg_op_types (
    agg_id INTEGER, op_type TEXT, ops INTEGER, calls INTEGER,
    cpu_time_total INTEGER, cpu_time_avg REAL, cpu_time_min INTEGER, cpu_time_max INTEGER,
    gpu_time_total INTEGER, gpu_time_avg REAL, gpu_time_min INTEGER, gpu_time_max INTEGER,
    cpu_overhead_total INTEGER, cpu_overhead_avg REAL, cpu_overhead_min INTEGER, cpu_overhead_max INTEGER,
    gpu_idle_total INTEGER, gpu_idle_avg REAL, gpu_idle_min INTEGER, gpu_idle_max INTEGER,
    kernel_count INTEGER, tc_eligible INTEGER, using_tc INTEGER, kernels TEXT,
    PRIMARY KEY (agg_id, op_type)
);

-- One row per distinct kernel name in the aggregation; op_names: the op nodes that launched it.
CREATE TABLE agg_kernels (
    agg_id INTEGER, kernel_name TEXT, uses_tc INTEGER, calls INTEGER, gpu_time_ns INTEGER,
    avg_ns REAL, min_ns INTEGER, max_ns INTEGER, op_names TEXT, critical_path_ns INTEGER,
    PRIMARY KEY (agg_id, kernel_name)
);

-- Kernels summed per op node and kernel name: the "Ops and Kernels" view's lower table.
CREATE TABLE agg_op_kernels (
    agg_id INTEGER, node_id INTEGER, kernel_name TEXT, uses_tc INTEGER, calls INTEGER,
    gpu_time_ns INTEGER, avg_ns REAL, min_ns INTEGER, max_ns INTEGER,
    PRIMARY KEY (agg_id, node_id, kernel_name)
);

-- The Group Ops tree: groups (scope prefixes) and op nodes. A group's CPU, API and GPU times are the union of
-- its members' intervals (never more than the wall clock); calls and kernel counts add.
CREATE TABLE agg_groups (
    agg_id INTEGER, group_id INTEGER, parent_group_id INTEGER, is_group INTEGER, level INTEGER,
    name TEXT, path TEXT, node_id INTEGER, calls INTEGER, kernel_count INTEGER, gpu_time_ns INTEGER,
    tc_gpu_time_ns INTEGER, cpu_time_ns INTEGER, api_time_ns INTEGER, cpu_overhead_ns INTEGER,
    gpu_idle_ns INTEGER, tc_eligible INTEGER, using_tc INTEGER, PRIMARY KEY (agg_id, group_id)
);

-- simulated_saving_ns: the finding's advice priced by replaying the aggregation on its dependency graph
-- (docs/whatif.md); NULL when no scenario models the advice or it cannot be priced. not_priced: why a finding
-- has no estimated saving (a risk, e.g. memory near capacity, rather than time lost); NULL for a priced one.
CREATE TABLE findings (
    agg_id INTEGER, finding_id INTEGER, rule TEXT, severity TEXT, problem TEXT, recommendation TEXT,
    est_saving_ns INTEGER, est_saving_pct REAL, evidence_json TEXT, simulated_saving_ns INTEGER, not_priced TEXT,
    PRIMARY KEY (agg_id, finding_id)
);

-- Time on the aggregation's critical path (docs/whatif.md) per rank whose work it ran through and category
-- (whatif.graph.CATEGORIES); per aggregation the rows add up to its wall clock. rank -1: before the first event
-- the path reaches. No rows when the profile could not be replayed (aggregations.critical_path_note says why).
CREATE TABLE agg_critical_path (
    agg_id INTEGER, rank INTEGER, category TEXT, time_ns INTEGER, PRIMARY KEY (agg_id, rank, category)
);
"""

#: Indexes for every sort and filter the viewer offers (and the joins the analyses use).
INDEXES = """
CREATE INDEX kernels_iteration ON kernels (rank, iteration, start);
CREATE INDEX kernels_op ON kernels (op_id);
CREATE INDEX kernels_root_op ON kernels (root_op_id);
CREATE INDEX kernels_dur ON kernels (dur);
CREATE INDEX kernels_name ON kernels (name);
CREATE INDEX kernels_start ON kernels (start);
CREATE INDEX kernels_device ON kernels (device, start);
CREATE INDEX op_instances_iteration ON op_instances (rank, iteration, start);
CREATE INDEX op_instances_node ON op_instances (node_id);
CREATE INDEX op_nodes_name ON op_nodes (name);
CREATE INDEX memops_iteration ON memops (rank, iteration, start);
CREATE INDEX api_calls_iteration ON api_calls (rank, iteration, start);
CREATE INDEX ranges_start ON ranges (rank, start);
CREATE INDEX python_frames_node ON python_frames (rank, node_id);
CREATE INDEX python_tree_parent ON python_tree (rank, parent_node_id);
CREATE INDEX op_instances_frame ON op_instances (frame_id);
CREATE INDEX agg_ops_gpu_time ON agg_ops (agg_id, gpu_time_ns);
CREATE INDEX agg_ops_cpu_time ON agg_ops (agg_id, cpu_time_ns);
CREATE INDEX agg_ops_name ON agg_ops (agg_id, op_name);
CREATE INDEX agg_ops_type ON agg_ops (agg_id, op_type);
CREATE INDEX agg_ops_calls ON agg_ops (agg_id, calls);
CREATE INDEX agg_kernels_time ON agg_kernels (agg_id, gpu_time_ns);
CREATE INDEX agg_kernels_calls ON agg_kernels (agg_id, calls);
CREATE INDEX agg_ops_critical_path ON agg_ops (agg_id, critical_path_ns);
CREATE INDEX agg_kernels_critical_path ON agg_kernels (agg_id, critical_path_ns);
CREATE INDEX agg_op_types_gpu ON agg_op_types (agg_id, gpu_time_total);
CREATE INDEX agg_groups_parent ON agg_groups (agg_id, parent_group_id);
CREATE INDEX agg_iterations_profiled ON agg_iterations (agg_id, profiled, iteration);
"""

#: Raw tables written from the analysed model, in DDL column order.
RAW_TABLES = ("gpus", "iterations", "op_nodes", "op_instances", "ranges", "api_calls", "kernels", "memops", "syncs",
              "memory", "comm_args", "python_frames", "python_tree")


#: A job's tables (per-rank figures, collectives): created with the aggregations that need them.
JOB_DDL = """
-- Per rank of a job, per aggregation: GPU time split compute / exposed communication / memcpy / idle
-- (they add up to wall_clock_ns), all NCCL time (communication_ns), collective volume and the
-- straggler ranking (straggler_rank 1 = the rank the others wait for most). NULL = not measurable.
CREATE TABLE IF NOT EXISTS agg_ranks (
    agg_id INTEGER, rank INTEGER, host TEXT, world_size INTEGER, source_path TEXT,
    iterations_profiled INTEGER, wall_clock_ns INTEGER, avg_iteration_ns INTEGER, gpu_utilization REAL,
    compute_ns INTEGER, communication_ns INTEGER, exposed_communication_ns INTEGER, memcpy_ns INTEGER,
    idle_ns INTEGER, comm_overlap REAL, collective_count INTEGER, collective_bytes INTEGER,
    busbw_gbps REAL, collective_lag_ns INTEGER, iteration_lag_ns INTEGER, straggler_score REAL,
    straggler_rank INTEGER, PRIMARY KEY (agg_id, rank)
);

-- One row per NCCL kernel (source 'kernel') or NCCL NVTX range of a range-only input (source 'nvtx').
-- msg_bytes follows nccl-tests' size convention (allgather: the gathered output), -1 when unknown.
CREATE TABLE IF NOT EXISTS collectives (
    collective_id INTEGER PRIMARY KEY, rank INTEGER, source TEXT, collective TEXT, call_index INTEGER,
    name TEXT, device INTEGER, stream INTEGER, start INTEGER, "end" INTEGER, dur_ns INTEGER,
    iteration INTEGER, in_nelems INTEGER, out_nelems INTEGER, dtype TEXT, msg_bytes INTEGER,
    group_size INTEGER, algbw_gbps REAL, busbw_gbps REAL, arrival_lag_ns INTEGER, pg_name TEXT
);
CREATE INDEX IF NOT EXISTS collectives_rank ON collectives (rank, start);
CREATE INDEX IF NOT EXISTS collectives_match ON collectives (collective, call_index);
"""

#: The names the viewer searches, once each, with a trigram index (issue 21): created and filled by
#: ``store.writer.index_names`` when the raw tables are written (and for the aggregations' names by each
#: aggregation), only where SQLite has FTS5's trigram tokenizer; a database without them is searched by name
#: lists read from the rows (older databases).
SEARCH_DDL = """
-- kernels.search_key: a 64-bit hash of the kernel's name and the name of the outermost op it was launched beneath
-- (``store.writer.search_keys``), so that an index per sorted column can lead with both names in 8 bytes: a kernel
-- or op name search sorted by any such column merges the matching pairs' index ranges and reads only its page.
ALTER TABLE kernels ADD COLUMN search_key INTEGER;

-- Every distinct value of a searched name column once: source names the column ('kernels.name', 'ops.name' for
-- the outermost ops' names, 'op_nodes.op_type', 'agg_ops.op_name', ...), folded the name in lower case
-- (Python's str.lower, every alphabet), kernels the kernels of that name (kernels.name) or launched beneath the
-- outermost calls of that op name (ops.name), else NULL. A search reads the matching names here, never the rows.
CREATE TABLE IF NOT EXISTS search_names (
    name_id INTEGER PRIMARY KEY, source TEXT NOT NULL, name TEXT NOT NULL, folded TEXT NOT NULL, kernels INTEGER,
    UNIQUE (source, name)
);
-- SQLite FTS5 index of search_names.folded by trigrams (case_sensitive 1: folded is already lower case): the names
-- containing any text of 3 characters or more are a phrase query away.
CREATE VIRTUAL TABLE IF NOT EXISTS search_names_trigram USING fts5(
    folded, content='search_names', content_rowid='name_id', tokenize='trigram case_sensitive 1'
);
-- Per (kernel name, outermost op name) pair of the kernels (NULL: none) its search_key and kernels: a search by
-- kernel name, op name or both is the union of the pairs whose names match, each a range of the search_key indexes.
CREATE TABLE IF NOT EXISTS search_kernel_pairs (
    search_key INTEGER PRIMARY KEY, kernel_name TEXT, op_name TEXT, kernels INTEGER NOT NULL
);
"""

#: A kernel or op name search sorted by any column that sorts all kernels: each matching pair's range of one of
#: these indexes is already in the sort's order (built with the other indexes where kernels has search_key).
SEARCH_INDEXES = """
CREATE INDEX kernels_search_key ON kernels (search_key);
CREATE INDEX kernels_search_key_dur ON kernels (search_key, dur);
CREATE INDEX kernels_search_key_start ON kernels (search_key, start);
CREATE INDEX kernels_search_key_device ON kernels (search_key, device, start);
CREATE INDEX kernels_search_key_iteration ON kernels (search_key, rank, iteration, start);
CREATE INDEX kernels_search_key_op ON kernels (search_key, op_id);
"""

#: Nsight Compute counters of kernels (only when a CSV was imported).
COUNTERS_DDL = """
-- One Nsight Compute kernel launch with its counters (FLOPs, bytes per memory level, cycles) and the Tensor Core
-- verdict they give (uses_tc_source 'counters'), else the kernel name's ('name'); tensor_flops_basis says how
-- flops_tensor was obtained (ops_path counters, or tensor-pipe instructions x FLOPs per instruction of a shape);
-- nvtx_ranges is the JSON list of the NVTX ranges open at the launch as ncu --nvtx recorded them (outermost first).
CREATE TABLE IF NOT EXISTS ncu_kernels (
    ncu_id INTEGER PRIMARY KEY, source TEXT, kernel_id INTEGER, process_id INTEGER, kernel_name TEXT,
    device INTEGER, device_name TEXT, cc TEXT, time_ns REAL, time_source TEXT,
    flops_fp64 REAL, flops_fp32 REAL, flops_fp16 REAL, flops_tensor REAL,
    bytes_l1 REAL, bytes_l2 REAL, bytes_dram REAL, tensor_pipe_inst REAL,
    cycles REAL, cycles_per_second REAL, mma_inst REAL, total_inst REAL, tensor_share REAL,
    uses_tc INTEGER, uses_tc_source TEXT, tensor_flops_basis TEXT, flops_fma REAL,
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,
    nvtx_ranges TEXT
);
CREATE INDEX IF NOT EXISTS ncu_kernels_name ON ncu_kernels (kernel_name);
"""


def document(ddl: str) -> str:
    """The tables and columns of ``ddl`` as Markdown (docs/schema.md's generated part): each table or view
    with the SQL comment above it and its columns with their types, so the documented schema comes from
    the DDL itself. ``python -m dlscope.store.schema`` prints it for the whole database."""
    import re
    import sqlite3

    notes: dict[str, str] = {}
    comment: list[str] = []
    for line in ddl.splitlines():
        stripped = line.strip()
        if stripped.startswith("--"):
            comment.append(stripped[2:].strip())
            continue
        made = re.match(r"CREATE (?:VIRTUAL )?(?:TABLE|VIEW)(?: IF NOT EXISTS)? (\w+)", stripped)
        if made:
            notes[made.group(1)] = " ".join(comment)
        if stripped:
            comment = []
    conn = sqlite3.connect(":memory:")
    conn.executescript(ddl)
    out = []
    virtual = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")]
    for name, kind in conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') "
                                   "ORDER BY rowid"):
        if any(name.startswith(v + "_") for v in virtual):
            continue  # an FTS5 index's own storage
        cols = ", ".join(f"`{c}` {t or 'any'}".rstrip() for _, c, t, *_ in conn.execute(f'PRAGMA table_info("{name}")'))
        note = f" {notes[name]}" if notes.get(name) else ""
        out.append(f"- **`{name}`** ({kind}).{note}\n  Columns: {cols}.")
    conn.close()
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(document(DDL + JOB_DDL + COUNTERS_DDL + SEARCH_DDL), end="")
