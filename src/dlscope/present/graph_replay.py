"""What CUDA-graph replays do to the figures of an aggregation, and the one text that says so.

In a graphed capture (torch.cuda.graphs, ``torch.compile(mode="reduce-overhead")``) the forward and backward kernels
are replayed by one ``cudaGraphLaunch`` under torch's ``Graphed`` / ``GraphedBackward`` op nodes: the aten ops
that captured them (with their op types and input shapes) are not in the trace. By PRODUCT.md's definitions such
kernels belong to no Tensor Core-eligible op and carry no FLOP model, so Tensor Core kernel efficiency and MFU can
be n/a although the GPU ran matrix products for most of the step. Nothing is invented for them (no FLOPs, no
eligibility); the figures stay as defined, and their n/a (or their note) says why, with how much kernel time
was replayed. The summary (text and JSON), the HTML report and the viewer's dashboard all take their words from
:func:`figure_notes`.

The facts are read from the database (the aggregation's kernels whose launch call is a graph launch, by
``analyze.categories``' ``graph_launch`` pattern; matrix products by the kernel's name, ``precision_names``):
only aggregations that contain a graph launch cost more than one indexed look-up.

A graph replay is one case of matrix products MFU cannot count: any op node without a FLOP model leaves its
kernels' FLOPs out (a custom op such as vLLM's fused MoE, a ``torch.compile``'d ``CompiledFunction``, a backward
node of an old trace that recorded no shapes). :func:`unmodelled_matrix_work` finds them in the aggregation's
op-node × kernel table, and the MFU note says how much of the matrix-product kernel time they ran: there MFU
understates what the GPU did.
"""

from __future__ import annotations

import sqlite3

from ..analyze.categories import patterns
from ..experts.precision_names import is_math_kernel
from ..format import fmt_ns, fmt_pct, readable_value


def is_matrix_product(kernel_name: str | None, on_tensor_cores) -> bool:
    """A kernel that computes matrix products: one on Tensor Cores (they do nothing else), or a GEMM, convolution
    or attention kernel by its name (``precision_names``: CUDA-core FP32 GEMMs too). The one test for the graph
    replays' and the op nodes without a FLOP model's matrix work: a kernel whose name does not tell is still caught
    by its Tensor Core verdict."""
    return bool(on_tensor_cores) or is_math_kernel(kernel_name or "")


def _has_tables(conn: sqlite3.Connection, *names: str) -> bool:
    got = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    return all(n in got for n in names)


def graph_replay_facts(conn: sqlite3.Connection, agg_id: int) -> dict | None:
    """The aggregation's kernels replayed from CUDA/HIP graphs (launched by a graph launch call in its profiled
    iterations): ``kernel_count``, ``kernel_time_ns``, ``tc_kernel_time_ns`` (those using Tensor Cores),
    ``matrix_kernel_count`` / ``matrix_kernel_time_ns`` (GEMM, convolution and attention kernels by name),
    ``op_nodes`` (the op types of the aggregation's op nodes they ran under, by GPU time) and ``tc_op_nodes``
    (those of them that use Tensor Cores without being eligible); None when no kernel was replayed from a graph."""
    if not _has_tables(conn, "kernels", "api_calls", "agg_iterations"):
        return None
    rx = patterns()["graph_launch"]
    window = ("JOIN agg_iterations i ON i.agg_id = ? AND i.profiled = 1 AND i.rank = a.rank "
              "AND i.iteration = a.iteration")
    names = [r[0] for r in conn.execute(
        f"SELECT DISTINCT a.name FROM api_calls a {window} WHERE a.name LIKE '%GraphLaunch%'", (agg_id,))
        if r[0] and rx.search(r[0])]
    if not names:
        return None
    marks = ", ".join("?" * len(names))
    calls = f"SELECT a.api_id FROM api_calls a {window} WHERE a.name IN ({marks})"
    rows = conn.execute(
        "SELECT k.name, COUNT(*), SUM(k.dur), SUM(CASE WHEN k.uses_tc = 1 THEN k.dur ELSE 0 END) FROM kernels k "
        f"WHERE k.api_id IN ({calls}) GROUP BY k.name", (agg_id, *names)).fetchall()
    if not rows:
        return None
    math = [r for r in rows if is_matrix_product(r[0], r[3])]
    nodes = []
    if _has_tables(conn, "op_instances", "agg_ops"):
        nodes = conn.execute(
            "SELECT COALESCE(NULLIF(o.op_type, ''), o.op_name), o.using_tc, o.tc_eligible FROM agg_ops o "
            "WHERE o.agg_id = ? AND o.node_id IN ("
            "SELECT oi.node_id FROM kernels k JOIN op_instances oi ON oi.op_id = k.root_op_id "
            f"WHERE k.api_id IN ({calls})) ORDER BY o.gpu_time_ns DESC, o.op_name",
            (agg_id, agg_id, *names)).fetchall()
    return {"kernel_count": sum(r[1] for r in rows), "kernel_time_ns": sum(r[2] or 0 for r in rows),
            "tc_kernel_time_ns": sum(r[3] or 0 for r in rows),
            "matrix_kernel_count": sum(r[1] for r in math), "matrix_kernel_time_ns": sum(r[2] or 0 for r in math),
            "op_nodes": list(dict.fromkeys(n[0] for n in nodes)),
            "tc_op_nodes": list(dict.fromkeys(n[0] for n in nodes if n[1] and not n[2]))}


def unmodelled_matrix_work(conn: sqlite3.Connection, agg_id: int) -> dict | None:
    """The aggregation's matrix-product kernels (using Tensor Cores, or GEMM, convolution and attention kernels by
    name) that ran under op nodes without a FLOP model (``agg_ops.model_flops`` null or 0): ``kernel_time_ns``,
    ``kernel_count``, ``matrix_kernel_time_ns`` (all matrix-product kernel time under op nodes) and ``op_nodes``
    (``[name, ns]`` by time); None when there are none, or when no op node has the column."""
    if not _has_tables(conn, "agg_op_kernels", "agg_ops") or not any(
            r[1] == "model_flops" for r in conn.execute('PRAGMA table_info("agg_ops")')):
        return None
    rows = conn.execute(
        "SELECT o.op_name, k.kernel_name, k.uses_tc, k.calls, k.gpu_time_ns, COALESCE(o.model_flops, 0) "
        "FROM agg_op_kernels k JOIN agg_ops o ON o.agg_id = k.agg_id AND o.node_id = k.node_id "
        "WHERE k.agg_id = ?", (agg_id,)).fetchall()
    math = [r for r in rows if is_matrix_product(r[1], r[2] == 1)]
    left = [r for r in math if not r[5]]
    if not left:
        return None
    by_node: dict[str, int] = {}
    for name, _, _, _, ns, _ in left:
        by_node[name] = by_node.get(name, 0) + int(ns or 0)
    return {"kernel_time_ns": sum(int(r[4] or 0) for r in left), "kernel_count": sum(int(r[3] or 0) for r in left),
            "matrix_kernel_time_ns": sum(int(r[4] or 0) for r in math),
            "op_nodes": [[n, t] for n, t in sorted(by_node.items(), key=lambda item: (-item[1], item[0]))]}


def _unmodelled_text(work: dict) -> str:
    """'5.70 ms of the 6.49 ms of matrix-product kernel time (87.9%, 144 kernels) ran under op nodes without a
    FLOP model (vllm::moe_forward 5.21 ms, …), so their FLOPs are not counted'."""
    t, of = work["kernel_time_ns"], work["matrix_kernel_time_ns"]
    nodes = work["op_nodes"]
    shown = ", ".join(f"{name} {fmt_ns(ns)}" for name, ns in nodes[:3]) + (
        f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
    return (f"{fmt_ns(t)} of the {fmt_ns(of)} of matrix-product kernel time ({fmt_pct(t / of) if of else 'n/a'}, "
            f"{work['kernel_count']:,} kernels) ran under op nodes without a FLOP model ({shown}), so their FLOPs "
            "are not counted")


def _names(names: list[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _replayed(facts: dict, kernel_time_ns: int | None, units_plural: str) -> str:
    """'423.96 ms of the 436.22 ms of kernel time (97.2%) was replayed, 356.83 ms of it matrix products, 25.73 ms
    on Tensor Cores'."""
    t = facts["kernel_time_ns"]
    of = (f" of the {fmt_ns(kernel_time_ns)} of kernel time ({fmt_pct(t / kernel_time_ns)})"
          if kernel_time_ns else " of kernel time")
    text = f"{fmt_ns(t)}{of} was replayed"
    if facts["matrix_kernel_time_ns"]:
        text += f", {fmt_ns(facts['matrix_kernel_time_ns'])} of it matrix products"
    if facts["tc_kernel_time_ns"]:
        text += f", {fmt_ns(facts['tc_kernel_time_ns'])} on {units_plural}"
    return text


def _under(facts: dict) -> str:
    return f" ({_names(facts['op_nodes'])})" if facts["op_nodes"] else ""


def tc_efficiency_note(aggregation: dict, facts: dict | None, units_singular: str = "Tensor Core",
                       units_plural: str = "Tensor Cores") -> str | None:
    """Why the Tensor Core kernel efficiency is n/a, or what it leaves out; None when there is nothing to say."""
    if aggregation.get("tc_kernel_efficiency") is None and not aggregation.get("kernel_count"):
        return "no GPU kernels"
    if facts is None or not (facts["matrix_kernel_time_ns"] or facts["tc_kernel_time_ns"]):
        return None if aggregation.get("tc_kernel_efficiency") is not None else \
            f"no kernels of {units_singular}-eligible ops"
    replayed = _replayed(facts, aggregation.get("kernel_time_ns"), units_plural)
    if aggregation.get("tc_kernel_efficiency") is None:
        return (f"no {units_singular}-eligible op ran kernels: the matrix products ran replayed from CUDA graphs, "
                f"under the op nodes replaying them{_under(facts)}, not the ops that captured them; {replayed}")
    return (f"of the eligible ops' kernels; left out are the kernels replayed from CUDA graphs{_under(facts)}, "
            f"whose capturing ops are not in the trace: {replayed}")


#: how a computed MFU that leaves matrix products out is qualified (summary, HTML report, dashboard)
LOWER_BOUND = "a lower bound"


def _replays_math(facts: dict | None) -> bool:
    return facts is not None and facts["matrix_kernel_time_ns"] > 0


def mfu_note(mfu: dict, facts: dict | None, gpu_ran: bool = True, unmodelled: dict | None = None) -> str | None:
    """Why MFU is n/a, or what it leaves out; None when there is nothing to say. ``mfu``: the summary JSON's
    ``aggregation.mfu`` (``model_flops``: the window's total; ``model_flops_per_iteration`` None without
    iterations); ``gpu_ran``: whether the aggregation ran GPU kernels (a CPU run has no GPU peak to measure
    against: its ops' FLOP rate is said instead); ``unmodelled``: :func:`unmodelled_matrix_work` (said where no
    CUDA graph replay explains the FLOPs left out)."""
    replay = ""
    if _replays_math(facts):
        assert facts is not None
        replay = (f"{fmt_ns(facts['matrix_kernel_time_ns'])} of matrix-product kernels "
                  f"({facts['matrix_kernel_count']:,} kernels) ran replayed from CUDA graphs, which record no input "
                  "shapes, so their FLOPs are not counted")
    elif unmodelled is not None:
        replay = _unmodelled_text(unmodelled)
    total = mfu.get("model_flops")
    if total is None:
        total = mfu.get("model_flops_per_iteration")  # a summary without the window's total
    if total is None:  # no shapes at all: every op node lacks a model, and only a graph replay adds a reason
        shapes = "no op recorded input shapes: record them with record_shapes=True"
        return f"{shapes}; besides, {replay}" if replay and _replays_math(facts) else shapes
    if mfu.get("mfu") is not None:
        return f"{LOWER_BOUND}: it counts the ops with a FLOP model only; {replay}" if replay else None
    if not total:
        return (f"no op with a FLOP model ran: {replay}" if replay else
                "no matrix products (GEMM, convolution, attention) among the ops with recorded shapes")
    if not gpu_ran:
        rate = mfu.get("achieved_flops_per_s")
        return ("no GPU kernels ran, and MFU measures against a GPU's dense peak"
                + (f"; on the CPU the step did {readable_value('achieved_flops_per_s', float(rate))} of matrix "
                   "products over its wall clock" if rate else ""))
    if not mfu.get("precision"):
        return "the precision of the matrix products is unknown (their ops recorded no floating-point dtypes)"
    return f"the GPU's dense peak at {mfu['precision']} is unknown"


def model_note(model_summary: dict, facts: dict | None) -> str | None:
    """What the Model line's 'N using them' holds when op nodes that replay CUDA graphs use Tensor Cores without
    being eligible (PRODUCT.md counts the two independently); None otherwise."""
    if facts is None or not facts["tc_op_nodes"]:
        return None
    n, using = len(facts["tc_op_nodes"]), model_summary.get("op_nodes_using_tc") or 0
    which = (("the one using them is" if using == 1 else f"1 of the {using:,} using them is") if n == 1 else
             f"the {n:,} using them are" if n == using else f"{n:,} of the {using:,} using them are")
    return (f"{which} {'CUDA graph replays' if n > 1 else 'a CUDA graph replay'} ({_names(facts['tc_op_nodes'])}): "
            f"the eligible ops {'they replay' if n > 1 else 'it replays'} are not in the trace")


def figure_notes(conn: sqlite3.Connection, aggregation: dict, units_singular: str = "Tensor Core",
                 units_plural: str = "Tensor Cores") -> dict:
    """``{"graph_replay": facts or None, "tc_kernel_efficiency_note", "mfu_note", "mfu_unmodelled" (matrix-product
    kernels under op nodes without a FLOP model, or None), "mfu_lower_bound", "model_summary_note"}`` for an
    aggregation (a row of ``aggregations`` or the summary JSON's section; each note None when there is nothing
    to say): the one place the summary, the HTML report and the viewer's dashboard read these words from."""
    facts = graph_replay_facts(conn, int(aggregation["agg_id"]))
    unmodelled = unmodelled_matrix_work(conn, int(aggregation["agg_id"]))
    mfu = aggregation.get("mfu")
    if not isinstance(mfu, dict):  # a stored row: the MFU figures are its columns
        mfu = {"model_flops": aggregation.get("model_flops"),
               "model_flops_per_iteration": aggregation.get("model_flops_per_iteration"),
               "achieved_flops_per_s": aggregation.get("achieved_flops_per_s"),
               "precision": aggregation.get("mfu_precision"), "mfu": aggregation.get("mfu")}
    model = aggregation.get("model_summary")
    if not isinstance(model, dict):
        model = {"op_nodes_using_tc": aggregation.get("op_nodes_using_tc")}
    return {"graph_replay": facts,
            "tc_kernel_efficiency_note": tc_efficiency_note(aggregation, facts, units_singular, units_plural),
            "mfu_note": mfu_note(mfu, facts, gpu_ran=bool(aggregation.get("kernel_count")), unmodelled=unmodelled),
            "mfu_unmodelled": unmodelled,
            # MFU has a value but leaves matrix products out: under op nodes it cannot count, or replayed from a graph
            # (a graph launched outside any op has no op node at all)
            "mfu_lower_bound": mfu.get("mfu") is not None and (unmodelled is not None or _replays_math(facts)),
            "model_summary_note": model_note(model, facts)}
