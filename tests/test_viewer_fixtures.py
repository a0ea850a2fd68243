"""A small hand-made profile database for the viewer tests (DDL from store/schema.py, realistic rows).

Summary tables are filled from the raw rows with plain SQL here, independently of the pipeline, so the viewer
tests check the viewer and not the analysis. Names include HTML (``<script>``) to prove they stay text.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dlscope.store.schema import DDL, INDEXES, SCHEMA_VERSION

XSS_KERNEL = '<script>window.__pwned = 1</script>'
XSS_OP = '<img src=x onerror="window.__pwned=2">'
OPS = [  # name, type, tc_eligible, kernels (name, uses_tc, dur)
    ("aten::conv2d", "aten::conv2d", 1,
     [("sm80_xmma_fprop_implicit_gemm_f16f16", 1, 52_000), ("nchwToNhwcKernel", 0, 4_000)]),
    ("aten::linear", "aten::linear", 1, [("ampere_sgemm_128x64_tn", 0, 31_000)]),
    ("aten::relu", "aten::relu", 0, [("vectorized_elementwise_kernel", 0, 2_500)]),
    (XSS_OP, "custom", 0, [(XSS_KERNEL, 0, 1_234)]),
    ("Optimizer.step#SGD.step", "Optimizer.step", 0, [("multi_tensor_apply_kernel", 0, 9_000)]),
]
ITERATIONS = 4
REPEAT = 12  # op calls per iteration per op (enough rows to page)


def make_profile_db(path: Path, schema_version: int = SCHEMA_VERSION) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(DDL)
    conn.executescript(INDEXES)
    meta = {"schema_version": str(schema_version), "profile_name": "tiny resnet", "framework": "PyTorch",
            "framework_version": "2.13.0", "cuda_runtime_version": "12.8", "cpu_model": "AMD EPYC 7742",
            "dlscope_version": "0.1.0"}
    conn.executemany("INSERT INTO dlscope_meta VALUES (?, ?)", meta.items())
    conn.executemany("INSERT INTO gpus VALUES (?,?,?,?,?,?,?)",
                     [(0, 0, "NVIDIA A100-SXM4-80GB", 108, 85_000_000_000, 8, 0),
                      (0, 1, "NVIDIA A100-SXM4-80GB", 108, 85_000_000_000, 8, 0)])
    op_id = kernel_id = 0
    t = 1_000_000_000
    for it in range(ITERATIONS):
        it_start = t
        for rep in range(REPEAT):
            for node, (name, op_type, tc_el, kernels) in enumerate(OPS, 1):
                op_id += 1
                start, cpu = t, 20_000
                gpu_time = sum(k[2] for k in kernels)
                tc_time = sum(k[2] for k in kernels if k[1])
                if it == 0 and rep == 0:
                    conn.execute("INSERT INTO op_nodes (node_id, rank, name, op_type, direction, scope, input_shapes, "
                                 "data_type, tc_eligible) VALUES (?, 0, ?, ?, 'fwd', 'model/layer', "
                                 "'[[8, 3, 224, 224]]', 'float16', ?)", (node, name, op_type, tc_el))
                conn.execute("INSERT INTO op_instances (op_id, node_id, rank, pid, tid, start, \"end\", dur, "
                             "parent_id, root_id, depth, iteration, using_tc, kernel_count, tc_kernel_count, "
                             "kernel_time, gpu_time, tc_gpu_time, api_time, gpu_idle) "
                             "VALUES (?, ?, 0, 1, 1, ?, ?, ?, -1, ?, 0, ?, ?, ?, ?, ?, ?, ?, 5000, 0)",
                             (op_id, node, start, start + cpu, cpu, op_id, it, int(any(k[1] for k in kernels)),
                              len(kernels), sum(k[1] for k in kernels), gpu_time, gpu_time, tc_time))
                k_t = start + 5_000
                for kname, uses_tc, dur in kernels:
                    kernel_id += 1
                    dur = dur + (rep * 37 + it * 11) % 500  # distinct durations make sorting checkable
                    conn.execute("INSERT INTO kernels (kernel_id, rank, pid, device, stream, name, start, \"end\", "
                                 "dur, correlation, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, "
                                 "shared_mem, uses_tc, launch_ts, op_id, root_op_id, iteration) "
                                 "VALUES (?,0,1,?,7,?,?,?,?,?,?,1,1,256,1,1,64,0,?,?,?,?,?)",
                                 (kernel_id, kernel_id % 2, kname, k_t, k_t + dur, dur, kernel_id, 80 + rep,
                                  uses_tc, start + 100, op_id, op_id, it))
                    k_t += dur + 1_000
                t += max(cpu, k_t - start) + 2_000
        conn.execute("INSERT INTO iterations VALUES (0, ?, ?, ?, ?, ?)", (it, f"ProfilerStep#{it}", it_start, t, t))
        conn.execute("INSERT INTO memops (memop_id, rank, device, kind, name, start, \"end\", dur, bytes, iteration) "
                     "VALUES (?, 0, 0, 'memcpy', 'Memcpy HtoD', ?, ?, 3000, 4096, ?)",
                     (it + 1, it_start, it_start + 3000, it))
    _aggregate(conn, 1, 1, 3)
    conn.commit()
    conn.close()
    return path


def _aggregate(conn: sqlite3.Connection, agg: int, lo: int, hi: int) -> None:
    """Summary tables for iterations lo..hi from the raw rows (plain SQL, independent of the pipeline)."""
    w = "iteration BETWEEN :lo AND :hi"
    p = {"agg": agg, "lo": lo, "hi": hi}
    wall = conn.execute(f'SELECT MAX("end") - MIN(start) FROM iterations WHERE {w}', p).fetchone()[0]
    kn, kt, tct = conn.execute(f"SELECT COUNT(*), SUM(dur), SUM(dur * uses_tc) FROM kernels WHERE {w}", p).fetchone()
    elig = conn.execute("SELECT SUM(k.dur) FROM kernels k JOIN ops o ON o.op_id = k.op_id WHERE o.tc_eligible = 1 "
                        "AND k.iteration BETWEEN :lo AND :hi", p).fetchone()[0]
    busy = kt  # kernels never overlap in this fixture
    profiled = hi - lo + 1
    conn.execute("INSERT INTO aggregations (agg_id, created_at, rank, iter_start, iter_stop, key_node, "
                 "iteration_method, iterations_profiled, wall_clock_ns, avg_iteration_ns, gpu_busy_ns, "
                 "gpu_utilization, "
                 "kernel_count, kernel_time_ns, tc_kernel_time_ns, tc_eligible_kernel_time_ns, tc_kernel_efficiency, "
                 "memory_ns, tensor_core_ns, non_tensor_core_ns, dataloader_ns, io_ns, cpu_ns, other_ns) "
                 "VALUES (?, '2026-11-21T00:00:00', 0, ?, ?, NULL, 'profiler_step', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                 "9000, ?, ?, 0, 0, ?, ?)",
                 (agg, lo, hi, profiled, wall, wall / profiled, busy, busy / wall, kn, kt, tct, elig, tct / elig,
                  tct, kt - tct, (wall - kt - 9000) // 2, wall - kt - 9000 - (wall - kt - 9000) // 2))
    conn.execute("INSERT INTO agg_gpus SELECT :agg, 0, device, SUM(dur), SUM(dur) * 1.0 / :wall, COUNT(*), SUM(dur), "
                 f"SUM(dur * uses_tc), 0 FROM kernels WHERE {w} GROUP BY device", {**p, "wall": wall})
    conn.execute("INSERT INTO agg_iterations SELECT :agg, 0, i.iteration, i.iteration BETWEEN :lo AND :hi, i.start, "
                 "i.\"end\", i.\"end\" - i.start, COUNT(k.kernel_id), SUM(k.uses_tc), SUM(k.dur), "
                 "SUM(k.dur * k.uses_tc), "
                 "SUM(k.dur), SUM(k.dur * k.uses_tc), SUM(k.dur * (1 - k.uses_tc)), 3000, 0, 0, "
                 "(i.\"end\" - i.start - SUM(k.dur) - 3000) / 2, "
                 "(i.\"end\" - i.start - SUM(k.dur) - 3000) - (i.\"end\" - i.start - SUM(k.dur) - 3000) / 2, "
                 "NULL FROM iterations i JOIN kernels k ON k.iteration = i.iteration GROUP BY i.iteration", p)
    conn.execute("INSERT INTO agg_ops (agg_id, node_id, rank, op_name, op_type, direction, scope, input_shapes, "
                 "data_type, calls, kernel_count, tc_kernel_count, gpu_time_ns, tc_gpu_time_ns, cpu_time_ns, "
                 "api_time_ns, cpu_overhead_ns, gpu_idle_ns, tc_eligible, using_tc) "
                 "SELECT :agg, o.node_id, 0, MIN(o.name), MIN(o.op_type), 'fwd', 'model/layer', "
                 "MIN(o.input_shapes), 'float16', COUNT(*), SUM(o.kernel_count), "
                 "SUM((SELECT COUNT(*) FROM kernels k WHERE k.op_id = o.op_id AND k.uses_tc = 1)), "
                 "SUM((SELECT SUM(dur) FROM kernels k WHERE k.op_id = o.op_id)), "
                 "SUM((SELECT SUM(dur * uses_tc) FROM kernels k WHERE k.op_id = o.op_id)), SUM(o.dur), "
                 f"SUM(o.api_time), SUM(o.dur - o.api_time), 0, MAX(o.tc_eligible), MAX(o.using_tc) FROM ops o "
                 f"WHERE o.{w} GROUP BY o.node_id", p)
    conn.execute("INSERT INTO agg_op_kernels SELECT :agg, o.node_id, k.name, MAX(k.uses_tc), COUNT(*), SUM(k.dur), "
                 "AVG(k.dur), MIN(k.dur), MAX(k.dur) FROM kernels k JOIN ops o ON o.op_id = k.op_id "
                 "WHERE k.iteration BETWEEN :lo AND :hi GROUP BY o.node_id, k.name", p)
    conn.execute("INSERT INTO agg_kernels (agg_id, kernel_name, uses_tc, calls, gpu_time_ns, avg_ns, min_ns, max_ns) "
                 "SELECT :agg, name, MAX(uses_tc), COUNT(*), SUM(dur), AVG(dur), MIN(dur), "
                 f"MAX(dur) FROM kernels WHERE {w} GROUP BY name", p)
    conn.execute("INSERT INTO agg_op_types (agg_id, op_type, ops, calls, cpu_time_total, cpu_time_avg, cpu_time_min, "
                 "cpu_time_max, gpu_time_total, gpu_time_avg, gpu_time_min, gpu_time_max, cpu_overhead_total, "
                 "cpu_overhead_avg, cpu_overhead_min, cpu_overhead_max, gpu_idle_total, gpu_idle_avg, gpu_idle_min, "
                 "gpu_idle_max, kernel_count, tc_eligible, using_tc) "
                 "SELECT :agg, op_type, COUNT(*), SUM(calls), SUM(cpu_time_ns), "
                 "AVG(cpu_time_ns), MIN(cpu_time_ns), MAX(cpu_time_ns), SUM(gpu_time_ns), AVG(gpu_time_ns), "
                 "MIN(gpu_time_ns), MAX(gpu_time_ns), SUM(cpu_overhead_ns), AVG(cpu_overhead_ns), "
                 "MIN(cpu_overhead_ns), "
                 "MAX(cpu_overhead_ns), 0, 0, 0, 0, SUM(kernel_count), SUM(tc_eligible), SUM(using_tc) "
                 "FROM agg_ops WHERE agg_id = :agg GROUP BY op_type", p)
    # Group tree: / -> model/ -> {encoder/ (conv, linear, relu, custom), optimizer op}
    ops = {r[0]: r for r in conn.execute("SELECT node_id, op_name, calls, kernel_count, gpu_time_ns, tc_gpu_time_ns, "
                                         "cpu_time_ns, api_time_ns, cpu_overhead_ns, tc_eligible, using_tc "
                                         "FROM agg_ops WHERE agg_id = ?", (agg,))}
    groups = [(1, None, 1, 1, "/", "/", None, list(ops)), (2, 1, 1, 2, "model/", "/model/", None, list(ops)),
              (3, 2, 1, 3, "encoder/", "/model/encoder/", None, [1, 2, 3, 4])]
    rows = []
    for gid, parent, is_group, level, name, path, node, members in groups:
        s = [sum(ops[m][i] for m in members) for i in range(2, 11)]
        rows.append((agg, gid, parent, is_group, level, name, path, node, s[0], s[1], s[2], s[3], s[4], s[5], s[6], 0,
                     s[7], s[8]))
    for gid, (node, parent, level) in enumerate([(1, 3, 4), (2, 3, 4), (3, 3, 4), (4, 3, 4), (5, 2, 3)], 4):
        o = ops[node]
        rows.append((agg, gid, parent, 0, level, o[1], ("/model/encoder/" if parent == 3 else "/model/") + o[1], node,
                     o[2], o[3], o[4], o[5], o[6], o[7], o[8], 0, o[9], o[10]))
    conn.executemany("INSERT INTO agg_groups VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    conn.executemany("INSERT INTO findings (agg_id, finding_id, rule, severity, problem, recommendation, "
                     "est_saving_ns, est_saving_pct, evidence_json) VALUES (?,?,?,?,?,?,?,?,?)", [
        (agg, 1, "tc_eligible_not_using_tc", "high", "1 op was eligible to use Tensor Cores but none of its kernels do",
         "Try enabling AMP: https://pytorch.org/docs/stable/amp.html", 31_000 * 36, 0.12,
         json.dumps({"node_ids": [2]})),
        (agg, 2, "slow_kernels", "medium", "Two kernels take most of the GPU time", "Check their shapes.", None, None,
         json.dumps({"kernel_names": ["sm80_xmma_fprop_implicit_gemm_f16f16", XSS_KERNEL]})),
        (agg, 3, "slow_iteration", "low", "Iteration 2 is slower than the others", "Look for stragglers.", None, None,
         json.dumps({"iterations": [2]})),
    ])
