"""Every table the views show, declared as data: columns (label, SQL, kind), scopes, default sort.

Column and scope names here are the only names a URL may use; everything else is a bad parameter. Kinds drive
both the SQL filter (text: contains, num/ns: comparisons, bool: 1/0) and the browser's formatting (ns: readable
units with exact nanoseconds on hover).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Column:
    name: str
    label: str
    sql: str
    kind: str = "int"            # text | int | float | ns (duration) | ts (timestamp, ns) | bool | pct | bytes
    sortable: bool = True
    big_sort: bool = True        # sortable on the whole (unscoped) huge table: an index leads with it
    join: str | None = None      # join needed when this column is filtered or sorted on
    hidden: bool = False         # shown only on demand (still filterable, exported)
    order: str | None = None     # ORDER BY expression when it differs from ``sql``
    desc_first: bool | None = None
    #: For a text column over millions of rows: list its distinct values and counts through an index (``lookup``),
    #: match the search in Python, and filter with ``in_sql`` (``:p`` = JSON list of the matches), not a LIKE scan.
    lookup: str | None = None
    in_sql: str | None = None
    #: a column of the table that databases written by an older dlscope lack: read as NULL there
    added: bool = False
    #: (column the sql needs, sql without it): a column shown from a newer one when the database has it
    newer: tuple[str, str] | None = None
    #: A name column whose distinct values the database indexes (``search_names.source``): a search finds the
    #: matching names through the trigram index and filters the rows by name (``in_sql``, or ``sql IN`` the list).
    names: str | None = None


@dataclass(frozen=True)
class Scope:
    """A URL parameter that narrows the table (agg, iteration, node...); ``sql`` uses named parameter :name."""

    name: str
    sql: str
    kind: str = "int"            # int | text | list (JSON list bound through json_each)
    required: bool = False
    narrows: bool = False        # a scope that makes a huge table small (unindexed sorts allowed then)


@dataclass(frozen=True)
class TableSpec:
    name: str
    title: str
    source: str                  # FROM clause (may use scope parameters inside a subquery)
    columns: tuple[Column, ...]
    default_sort: str
    default_desc: bool = True
    key: str | None = None       # unique row key: tiebreaker and late row lookup for deep pages
    scopes: tuple[Scope, ...] = ()
    joins: dict = field(default_factory=dict)
    requires: tuple[str, ...] = ()   # tables that must exist in the database
    huge: bool = False           # raw events: may hold millions of rows

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def scope(self, name: str) -> Scope | None:
        return next((s for s in self.scopes if s.name == name), None)


AGG = Scope("agg", "agg_id = :agg", required=True)


def _stats(prefix: str, label: str) -> tuple[Column, ...]:
    return tuple(Column(f"{prefix}_{s}", f"{label} {t}", f"{prefix}_{s}", "ns")
                 for s, t in (("total", "Total"), ("avg", "Avg"), ("min", "Min"), ("max", "Max")))


OP_TYPES = TableSpec(
    "op_types", "Op Types", "agg_op_types",
    (Column("op_type", "Op Type", "op_type", "text", names="agg_op_types.op_type"),
     Column("ops", "# Ops", "ops"),
     Column("calls", "# Calls", "calls"),
     *_stats("cpu_time", "CPU Time"), *_stats("gpu_time", "GPU Time"),
     *_stats("cpu_overhead", "CPU Overhead Time"), *_stats("gpu_idle", "GPU Idle Time"),
     Column("kernel_count", "Kernel Calls", "kernel_count"),
     Column("tc_eligible", "TC Eligible Ops", "tc_eligible"),
     Column("using_tc", "Ops Using TC", "using_tc")),
    "gpu_time_total", scopes=(AGG,), requires=("agg_op_types",))

OP_COLUMNS = (
    Column("gpu_time_ns", "GPU Time", "gpu_time_ns", "ns"),
    Column("cpu_time_ns", "CPU Time", "cpu_time_ns", "ns"),
    Column("critical_path_ns", "Critical Path", "critical_path_ns", "ns", added=True),
    Column("node_id", "Op ID", "node_id"),
    Column("op_name", "Op Name", "op_name", "text", names="agg_ops.op_name"),
    Column("direction", "Direction", "direction", "text"),
    Column("op_type", "Op Type", "op_type", "text", names="agg_ops.op_type"),
    Column("calls", "Calls", "calls"),
    Column("tc_eligible", "TC Eligible", "tc_eligible", "bool"),
    Column("using_tc", "Using TC", "using_tc", "bool"),
    Column("kernel_count", "Kernel Calls", "kernel_count"),
    Column("tc_kernel_count", "TC Kernel Calls", "tc_kernel_count", hidden=True),
    Column("data_type", "Data Type", "data_type", "text"),
    Column("tc_gpu_time_ns", "TC GPU Time", "tc_gpu_time_ns", "ns", hidden=True),
    Column("api_time_ns", "API Time", "api_time_ns", "ns", hidden=True),
    Column("cpu_overhead_ns", "CPU Overhead", "cpu_overhead_ns", "ns", hidden=True),
    Column("gpu_idle_ns", "GPU Idle", "gpu_idle_ns", "ns", hidden=True),
    Column("model_flops", "Model FLOPs", "model_flops", hidden=True),
    Column("mfu", "MFU", "mfu", "pct", hidden=True),
    Column("input_shapes", "Input Shapes", "input_shapes", "text"),
    # the innermost user Python frame (file:line) when the trace recorded stacks, else the scope
    Column("scope", "Stack Trace / Scope", "CASE WHEN stack <> '' THEN stack ELSE scope END", "text",
           newer=("stack", "scope")),
    Column("rank", "Rank", "rank", hidden=True),
)

OPS = TableSpec(
    "ops", "Ops", "agg_ops", OP_COLUMNS, "gpu_time_ns", key="node_id",
    scopes=(AGG, Scope("nodes", "node_id IN (SELECT value FROM json_each(:nodes))", "list")),
    requires=("agg_ops",))

_KERNEL_SUMMARY_COLUMNS = (
    Column("kernel_name", "Kernel Name", "kernel_name", "text", names="agg_kernels.kernel_name"),
    Column("uses_tc", "Using TC", "uses_tc", "bool"),
    Column("calls", "Calls", "calls"),
    Column("gpu_time_ns", "GPU Time", "gpu_time_ns", "ns"),
    Column("avg_ns", "Avg", "avg_ns", "ns"),
    Column("min_ns", "Min", "min_ns", "ns"),
    Column("max_ns", "Max", "max_ns", "ns"),
)

OP_KERNELS = TableSpec(
    "op_kernels", "Kernel Summaries", "agg_op_kernels",
    (replace(_KERNEL_SUMMARY_COLUMNS[0], names="agg_op_kernels.kernel_name"), *_KERNEL_SUMMARY_COLUMNS[1:]),
    "gpu_time_ns",
    scopes=(AGG, Scope("node", "node_id = :node", required=True)), requires=("agg_op_kernels",))

KERNEL_SUMMARY = TableSpec(
    "kernel_summary", "Kernels", "agg_kernels",
    (*_KERNEL_SUMMARY_COLUMNS[:4], Column("critical_path_ns", "Critical Path", "critical_path_ns", "ns", added=True),
     *_KERNEL_SUMMARY_COLUMNS[4:]), "gpu_time_ns",
    scopes=(AGG, Scope("kernel_names", "kernel_name IN (SELECT value FROM json_each(:kernel_names))", "list")),
    requires=("agg_kernels",))

#: samples per step as analyze.throughput.throughput_facts finds them: the import's options, else the capture's
_SAMPLES_PER_STEP = ("(SELECT COALESCE(json_extract(value, '$.throughput.samples_per_step'), "
                     "json_extract(value, '$.throughput.batch_size'), json_extract(value, '$.capture.batch_size')) "
                     "FROM dlscope_meta WHERE key = 'extra_json')")

ITERATIONS = TableSpec(
    "iterations", "Iterations", "agg_iterations",
    (Column("iteration", "Iteration", "iteration", desc_first=False),
     Column("rank", "Rank", "rank"),
     Column("profiled", "Profiled", "profiled", "bool"),
     Column("start", "Timestamp (ns)", "start", "ts"),
     Column("duration_ns", "Duration", "duration_ns", "ns"),
     Column("kernel_count", "Total Kernels", "kernel_count"),
     Column("tc_kernel_count", "TC Kernels", "tc_kernel_count"),
     Column("kernel_time_ns", "Total GPU Time", "kernel_time_ns", "ns"),
     Column("tc_kernel_time_ns", "Total TC GPU Time", "tc_kernel_time_ns", "ns"),
     Column("gpu_busy_ns", "GPU Busy", "gpu_busy_ns", "ns", hidden=True),
     Column("tensor_core_ns", "Using Tensor Cores", "tensor_core_ns", "ns", hidden=True),
     Column("non_tensor_core_ns", "Not Using Tensor Cores", "non_tensor_core_ns", "ns", hidden=True),
     Column("memory_ns", "Memory", "memory_ns", "ns", hidden=True),
     Column("dataloader_ns", "Dataloader", "dataloader_ns", "ns", hidden=True),
     Column("io_ns", "I/O", "io_ns", "ns", hidden=True),
     Column("cpu_ns", "CPU", "cpu_ns", "ns", hidden=True),
     Column("other_ns", "Other", "other_ns", "ns", hidden=True),
     Column("reader_cost_ns", "Reader Cost", "reader_cost_ns", "ns"),
     Column("reader_cost_ratio", "Reader / Batch Cost", "reader_cost_ns * 1.0 / NULLIF(duration_ns, 0)", "pct"),
     Column("samples_per_s", "Samples/s", f"{_SAMPLES_PER_STEP} * 1e9 / NULLIF(duration_ns, 0)", "float")),
    "iteration", default_desc=False,
    scopes=(AGG, Scope("rank", "rank = :rank"),
            Scope("iterations", "iteration IN (SELECT value FROM json_each(:iterations))", "list")),
    requires=("agg_iterations",))

KERNELS = TableSpec(
    "kernels", "Kernels", "kernels k",
    (Column("op_name", "Op Name", "o.name", "text", big_sort=False, join="ops", names="ops.name",
            lookup="SELECT n.name, SUM(i.kernel_count) FROM op_instances i JOIN op_nodes n ON n.node_id = i.node_id "
                   "WHERE i.parent_id < 0 GROUP BY n.name",
            in_sql="k.root_op_id IN (SELECT op_id FROM op_instances WHERE node_id IN "
                   "(SELECT node_id FROM op_nodes WHERE name IN (SELECT value FROM json_each(:p))))"),
     Column("kernel_name", "Kernel Name", "k.name", "text", names="kernels.name",
            lookup="SELECT name, COUNT(*) FROM kernels GROUP BY name",
            in_sql="k.name IN (SELECT value FROM json_each(:p))"),
     Column("device", "Device ID", "k.device", order="k.device, k.start"),
     Column("rank", "Rank", "k.rank", big_sort=False, hidden=True),
     Column("stream", "Stream", "k.stream", big_sort=False),
     Column("launch_ts", "Kernel Timestamp (ns)", "k.launch_ts", "ts", big_sort=False, desc_first=False),
     Column("start", "GPU Start (ns)", "k.start", "ts", desc_first=False),
     Column("dur", "GPU Time", "k.dur", "ns"),
     Column("uses_tc", "Uses TC", "k.uses_tc", "bool", big_sort=False),
     Column("grid", "Grid", "'(' || k.grid_x || ', ' || k.grid_y || ', ' || k.grid_z || ')'", "text",
            big_sort=False, order="k.grid_x * k.grid_y * k.grid_z"),
     Column("block", "Block", "'(' || k.block_x || ', ' || k.block_y || ', ' || k.block_z || ')'", "text",
            big_sort=False, order="k.block_x * k.block_y * k.block_z"),
     Column("registers", "Registers", "k.registers", big_sort=False, hidden=True),
     Column("shared_mem", "Shared Mem", "k.shared_mem", "bytes", big_sort=False, hidden=True),
     Column("active_blocks_per_sm", "Blocks per SM", "NULLIF(k.active_blocks_per_sm, -1)", big_sort=False, hidden=True),
     Column("waves", "Waves", "k.waves", "float", big_sort=False),
     Column("last_wave_fill", "Last Wave Fill", "k.last_wave_fill", "pct", big_sort=False, hidden=True),
     Column("occupancy", "Occupancy", "k.occupancy", "pct", big_sort=False, hidden=True),
     Column("est_occupancy_pct", "Kineto Est. Occupancy %", "NULLIF(k.est_occupancy_pct, -1)", big_sort=False,
            hidden=True),
     Column("iteration", "Iteration", "k.iteration", order="k.rank, k.iteration, k.start"),
     Column("op_id", "Op Instance", "k.op_id", hidden=True),
     Column("kernel_id", "Kernel ID", "k.kernel_id", hidden=True)),
    "dur", key="k.kernel_id",
    scopes=(Scope("rank", "k.rank = :rank"),
            # rank IN (...) lets SQLite use the (rank, iteration, start) index when no rank is given
            Scope("iteration", "k.rank IN (SELECT DISTINCT rank FROM iterations) AND k.iteration = :iteration",
                  narrows=True),
            Scope("node", "k.root_op_id IN (SELECT op_id FROM op_instances WHERE node_id = :node)", narrows=True),
            Scope("kernel_names", "k.name IN (SELECT value FROM json_each(:kernel_names))", "list")),
    # the base tables, not the `ops` view: SQLite cannot flatten a joined view on the right of a LEFT JOIN
    joins={"ops": "LEFT JOIN op_instances oi ON oi.op_id = k.root_op_id "
                  "LEFT JOIN op_nodes o ON o.node_id = oi.node_id"},
    requires=("kernels", "op_instances", "op_nodes"), huge=True)

ITERATION_OPS = TableSpec(
    "iteration_ops", "Ops in Selected Iteration",
    """(SELECT n.node_id AS node_id, n.name AS op_name, n.direction AS direction, n.op_type AS op_type,
              n.data_type AS data_type, n.scope AS scope, i.calls AS calls, i.kernel_count AS kernel_count,
              i.tc_kernel_count AS tc_kernel_count, i.gpu_time AS gpu_time, i.tc_gpu_time AS tc_gpu_time
         FROM (SELECT o.node_id, COUNT(*) AS calls, SUM(o.kernel_count) AS kernel_count,
                      SUM(o.tc_kernel_count) AS tc_kernel_count, SUM(o.gpu_time) AS gpu_time,
                      SUM(o.tc_gpu_time) AS tc_gpu_time
                 FROM op_instances o
                WHERE o.iteration = :iteration AND o.parent_id < 0 AND o.rank IN
                      (SELECT rank FROM iterations WHERE iteration = :iteration AND (:rank IS NULL OR rank = :rank))
                GROUP BY o.node_id) i JOIN op_nodes n ON n.node_id = i.node_id) t""",
    (Column("node_id", "Op ID", "node_id"),
     Column("op_name", "Op Name", "op_name", "text", names="ops.name"),
     Column("direction", "Direction", "direction", "text"),
     Column("op_type", "Op Type", "op_type", "text", names="op_nodes.op_type"),
     Column("calls", "Calls", "calls"),
     Column("kernel_count", "Total Kernels", "kernel_count"),
     Column("tc_kernel_count", "TC Kernels", "tc_kernel_count"),
     Column("gpu_time", "Total GPU Time", "gpu_time", "ns"),
     Column("tc_gpu_time", "TC GPU Time", "tc_gpu_time", "ns"),
     Column("data_type", "Data Type", "data_type", "text"),
     Column("scope", "Stack Trace / Scope", "scope", "text")),
    "gpu_time", key="node_id",
    scopes=(Scope("iteration", "1", required=True), Scope("rank", "1")),
    requires=("op_instances", "op_nodes", "kernels"))

GROUP_COLUMNS = (
    Column("is_group", "Group or Op", "is_group", "bool"),
    Column("name", "Name", "name", "text"),
    Column("level", "Level", "level"),
    Column("calls", "Num Calls Aggregated", "calls"),
    Column("tc_eligible", "Num TC Eligible Ops", "tc_eligible"),
    Column("using_tc", "Num Ops Using TC", "using_tc"),
    Column("cpu_time_ns", "CPU Time", "cpu_time_ns", "ns"),
    Column("gpu_time_ns", "GPU Time", "gpu_time_ns", "ns"),
    Column("cpu_overhead_ns", "CPU Overhead Time", "cpu_overhead_ns", "ns"),
    Column("gpu_idle_ns", "GPU Idle Time", "gpu_idle_ns", "ns"),
    Column("kernel_count", "Kernel Calls", "kernel_count", hidden=True),
    Column("tc_gpu_time_ns", "TC GPU Time", "tc_gpu_time_ns", "ns", hidden=True),
    Column("api_time_ns", "API Time", "api_time_ns", "ns", hidden=True),
    Column("path", "Path", "path", "text", hidden=True),
    Column("node_id", "Op ID", "node_id", hidden=True),
    Column("group_id", "Row ID", "group_id", hidden=True),
    Column("parent_group_id", "Parent", "parent_group_id", hidden=True),
)

GROUPS = TableSpec("groups", "Group Ops", "agg_groups", GROUP_COLUMNS, "tree", default_desc=False,
                   key="group_id", scopes=(AGG,), requires=("agg_groups",))

TABLES: dict[str, TableSpec] = {t.name: t for t in (OP_TYPES, OPS, OP_KERNELS, KERNEL_SUMMARY, ITERATIONS, KERNELS,
                                                      ITERATION_OPS, GROUPS)}


def in_database(spec: TableSpec, db) -> TableSpec:
    """The table as the database ``db`` (a ProfileDB) answers it: a column added after the database was written
    reads as NULL ("n/a"), unsortable."""
    if not any(c.added or c.newer for c in spec.columns):
        return spec
    columns = db.columns(spec.source.split()[0])
    missing = {c.name for c in spec.columns if c.added and c.sql not in columns}
    older = {c.name: c.newer[1] for c in spec.columns if c.newer and c.newer[0] not in columns}
    if not missing and not older:
        return spec
    return replace(spec, columns=tuple(replace(c, sql="NULL", sortable=False) if c.name in missing else
                                       replace(c, sql=older[c.name]) if c.name in older else c
                                       for c in spec.columns))


def column_meta(spec: TableSpec) -> list[dict]:
    """What the browser needs to draw a table's columns."""
    return [{"name": c.name, "label": c.label, "kind": c.kind, "sortable": c.sortable, "big_sort": c.big_sort,
             "hidden": c.hidden, "desc_first": (c.kind != "text") if c.desc_first is None else c.desc_first}
            for c in spec.columns]
