"""Nsight Compute CSV import checked against sums of the raw counters done here with the csv module."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import data_file, data_files

import dlscope
from dlscope.errors import InputError
from dlscope.roofline.ncu import nvtx_range_names, read_ncu_csv, sniff_ncu_csv

PREFIX = "sm__sass_thread_inst_executed_op_"


def raw_counters(path: Path) -> tuple[list[str], dict[str, dict[str, tuple[str, str]]], dict[str, dict]]:
    """(header, {ID: {metric: (unit, value text)}}, {ID: identity row}) read with the csv module."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    reader = csv.reader(lines[start:])
    header = next(reader)
    metrics: dict[str, dict[str, tuple[str, str]]] = defaultdict(dict)
    identity: dict[str, dict] = {}
    for row in reader:
        rec = dict(zip(header, row))
        identity.setdefault(rec["ID"], rec)
        if rec.get("Metric Name"):
            metrics[rec["ID"]][rec["Metric Name"]] = (rec["Metric Unit"], rec["Metric Value"])
    return header, metrics, identity


def num(text: str) -> float:
    return float(text.replace(",", ""))


def test_v100_gemm_counters_match_an_independent_sum():
    path = data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv")
    _, metrics, identity = raw_counters(path)
    frame = read_ncu_csv(path).set_index("kernel_id")
    assert len(frame) == len(metrics) == 11
    for kid, m in metrics.items():
        row = frame.loc[int(kid)]
        v = {name: num(value) for name, (_, value) in m.items()}
        for col, p in (("flops_fp64", "d"), ("flops_fp32", "f"), ("flops_fp16", "h")):
            expected = (v[f"{PREFIX}{p}add_pred_on.sum"] + v[f"{PREFIX}{p}mul_pred_on.sum"]
                        + 2 * v[f"{PREFIX}{p}fma_pred_on.sum"])
            assert row[col] == pytest.approx(expected, rel=1e-12, abs=0)
        assert row["bytes_l1"] == v["l1tex__t_bytes.sum"]
        assert row["bytes_l2"] == v["lts__t_bytes.sum"]
        assert row["bytes_dram"] == v["dram__bytes.sum"]
        assert row["time_ns"] == pytest.approx(
            v["sm__cycles_elapsed.avg"] / v["sm__cycles_elapsed.avg.per_second"] * 1e9, rel=1e-12)
        assert row["tensor_pipe_inst"] == v["sm__inst_executed_pipe_tensor.sum"]
        assert row["kernel_name"] == identity[kid]["Kernel Name"]
        assert row["cc"] == "7.0" and row["device"] == 0


def test_volta_tensor_flops_equal_the_gemm_problem_size():
    """512 FLOPs per Volta HMMA instruction (NERSC) reproduces 2·20480³ for every GEMM kernel of the run."""
    frame = read_ncu_csv(data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv"))
    gemms = frame[frame["kernel_name"].str.contains("cutlass::Kernel")]
    assert len(gemms) == 7
    assert (gemms["flops_tensor"] == 2 * 20480**3).all()
    init = frame[frame["kernel_name"].str.contains("InitializeMatrix")]
    assert (init["flops_tensor"] == 0).all() and (init["tensor_pipe_inst"] == 0).all()


def test_ampere_tensor_flops_from_pipe_instructions_equal_the_gemm_problem_size():
    """A100 (CC 8.0): tensor-pipe instructions read here from the raw CSV x 2·M·N·K of the MMA shape the kernel
    name states (CUTLASS arch::Mma GemmShape<16,8,8>, cuBLAS s16816) = 2·20480³, the GEMM the program ran."""
    path = data_file("ncu_csv", "wangzy_gemm_roofline_metrics_a100.csv")
    _, metrics, identity = raw_counters(path)
    frame = read_ncu_csv(path).set_index("kernel_id")
    problem = 2 * 20480**3
    seen = 0
    for kid, m in metrics.items():
        name = identity[kid]["Kernel Name"]
        inst = num(m["sm__inst_executed_pipe_tensor.sum"][1])
        if "arch::Mma<cutlass::gemm::GemmShape<(int)16, (int)8, (int)8>" in name:
            per_inst = 2 * 16 * 8 * 8                       # one HMMA.1688 per mma.sync on sm_80
        elif "s16816gemm" in name:
            per_inst = 2 * 16 * 8 * 16                      # one HMMA.16816
        else:
            assert inst == 0 and frame.loc[int(kid), "flops_tensor"] == 0
            continue
        assert inst * per_inst == problem
        assert frame.loc[int(kid), "flops_tensor"] == problem
        seen += 1
    assert seen == 7
    assert frame["flops_fp32"].isna().all()           # this file has no SASS FLOP counters at all


def test_tensor_flops_stay_unknown_where_the_architecture_has_no_fixed_shape(tmp_path):
    """Hopper's wgmma has no fixed shape: without a shape in the name or ops_path metrics, NaN, never 0."""
    from dlscope.roofline.ncu import flops_per_tensor_instruction

    assert math.isnan(flops_per_tensor_instruction("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64"
                                                   "_warpgroupsize2x1x1_execute_segment_k_off_kernel", "9.0")[0])
    assert flops_per_tensor_instruction("ampere_s16816gemm_fp16_128x128_ldg8_stages_32x5_tn", "9.0")[0] == 4096
    assert flops_per_tensor_instruction("volta_h884gemm_64x64_ldg8_nn", "7.0")[0] == 512
    assert math.isnan(flops_per_tensor_instruction("any_kernel", "")[0])


def test_flash_attention_uses_the_tensor_pipe_where_pytorch_attention_does_not():
    flash = read_ncu_csv(data_file("ncu_csv", "leleucas_bert_attention_flashattn_ampere.csv"))
    torch_ = read_ncu_csv(data_file("ncu_csv", "leleucas_bert_attention_pytorch_ampere.csv"))
    matmul = r"gemm|fmha"
    flash_mm = flash[flash["kernel_name"].str.contains(matmul)]
    torch_mm = torch_[torch_["kernel_name"].str.contains(r"sgemm")]
    assert (flash_mm["tensor_pipe_inst"] > 0).all() and flash[flash["kernel_name"].str.contains("fmha")].shape[0] == 1
    assert len(torch_mm) > 0 and (torch_mm["tensor_pipe_inst"] == 0).all()
    assert (torch_mm["flops_fp32"] > 0).all()          # the PyTorch matmuls run as FP32 FFMA on CUDA cores
    assert flash_mm["tensor_pipe_inst"].sum() > torch_mm["tensor_pipe_inst"].sum()
    # Ragged rule rows (15 fields vs 13) and kernels with no GPU name in the file still parse.
    assert len(flash) == 10 and len(torch_) == 26
    assert (flash["time_ns"] > 0).all()


def _write_wide(long_path: Path, out: Path) -> None:
    """A `--page raw`-style CSV built by hand from the long file: units row, K-prefixed bytes."""
    header, metrics, identity = raw_counters(long_path)
    names = sorted({name for m in metrics.values() for name in m})
    ident = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Device", "CC"]
    units = {}
    for m in metrics.values():
        for name, (unit, _) in m.items():
            units[name] = unit
    units["dram__bytes.sum"] = "Kbyte"
    units["sm__cycles_elapsed.avg.per_second"] = "cycle/nsecond"
    with out.open("w", newline="") as fh:
        fh.write("==PROF== Connected to process 1\n")
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        w.writerow(ident + names)
        w.writerow([""] * len(ident) + [units[n] for n in names])
        for kid, m in metrics.items():
            values = []
            for n in names:
                value = num(m[n][1])
                if n == "dram__bytes.sum":
                    value /= 1e3
                if n == "sm__cycles_elapsed.avg.per_second":
                    value /= 1e9
                values.append(f"{value:,.6f}")
            w.writerow([identity[kid][c] for c in ident] + values)


def test_wide_raw_page_parses_to_the_same_kernels(tmp_path):
    long_path = data_file("ncu_csv", "wangzy_gemm_roofline_metrics_v100.csv")
    wide = tmp_path / "raw.csv"
    _write_wide(long_path, wide)
    assert sniff_ncu_csv(wide.read_bytes()[:4096])
    a, b = read_ncu_csv(long_path), read_ncu_csv(wide)
    assert list(a["kernel_id"]) == list(b["kernel_id"]) and list(a["kernel_name"]) == list(b["kernel_name"])
    for col in ("flops_fp64", "flops_fp32", "flops_fp16", "flops_tensor", "bytes_l1", "bytes_l2", "bytes_dram",
                "time_ns", "tensor_pipe_inst"):
        for x, y in zip(a[col], b[col]):
            assert math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6), col


def test_wide_format_with_device_name_and_duration(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text(
        '"ID","Kernel Name","device__attribute_display_name","gpu__time_duration.sum","dram__bytes.sum",'
        '"sm__sass_thread_inst_executed_op_ffma_pred_on.sum","sm__ops_path_tensor_src_fp16_dst_fp32.sum"\n'
        '"","","","usecond","Mbyte","inst",""\n'
        '"0","ampere_fp16_s16816gemm","NVIDIA A100-SXM4-80GB","12.50","1.5","1,000","2,048,000"\n')
    row = read_ncu_csv(path).iloc[0]
    assert row["device_name"] == "NVIDIA A100-SXM4-80GB"
    assert row["time_ns"] == pytest.approx(12_500) and row["time_source"] == "gpu__time_duration"
    assert row["bytes_dram"] == pytest.approx(1.5e6)
    assert math.isnan(row["flops_fp32"])                  # fadd/fmul not collected: unknown, not a partial sum
    assert row["flops_tensor"] == 2_048_000


def test_sniff_and_bad_input(tmp_path):
    for path in data_files("ncu_csv", "*.csv"):
        assert sniff_ncu_csv(path.read_bytes()[:8192]), path
    assert not sniff_ncu_csv(b'{"traceEvents": []}')
    assert not sniff_ncu_csv(b'"Start (ns)","End (ns)","Name"\n1,2,"x"\n')
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not an Nsight Compute CSV"):
        read_ncu_csv(other)
    with pytest.raises(InputError, match="cannot read"):
        read_ncu_csv(tmp_path / "missing.csv")


# ----------------------------------------------------------------- Tensor Core verdicts from the counters

TOTALS = ("sm__inst_executed.sum", "smsp__inst_executed.sum", "Executed Instructions")
PIPE = "sm__inst_executed_pipe_tensor.sum"
HMMA = "sm__inst_executed_pipe_tensor_op_hmma.sum"


def _hand_labels() -> dict[str, str]:
    """SHA-256 of a kernel name -> 'tensor_core' / 'not' (tests/data/tensor_core_labels.json)."""
    doc = json.loads((Path(__file__).parent / "data" / "tensor_core_labels.json").read_text(encoding="utf-8"))
    return {e.get("sha256") or hashlib.sha256(e["name"].encode()).hexdigest(): e["label"] for e in doc["labels"]}


@pytest.mark.parametrize("name", ["leleucas_bert_attention_flashattn_ampere.csv",
                                  "leleucas_bert_attention_pytorch_ampere.csv",
                                  "wangzy_gemm_roofline_metrics_a100.csv", "wangzy_gemm_roofline_metrics_v100.csv"])
def test_csvs_without_an_instruction_total_fall_back_to_the_name_verdict(name):
    """None of the real CSVs counts all executed instructions, so no share: the kernel name decides, and the
    tensor-pipe counts of a softmax or split-K reduce (FP16/FP64 work on GA100's shared pipe) do not."""
    path = data_file("ncu_csv", name)
    _, metrics, identity = raw_counters(path)
    assert not any(t in m for m in metrics.values() for t in TOTALS)
    frame = read_ncu_csv(path).set_index("kernel_id")
    labels = _hand_labels()
    for kid, m in metrics.items():
        row = frame.loc[int(kid)]
        label = labels[hashlib.sha256(identity[kid]["Kernel Name"].encode()).hexdigest()]
        assert row["uses_tc_source"] == "name" and math.isnan(row["tensor_share"]) and math.isnan(row["total_inst"])
        assert bool(row["uses_tc"]) == (label == "tensor_core"), identity[kid]["Kernel Name"][:80]
        assert row["mma_inst"] == num(m[PIPE][1])
    if "pytorch" in name:
        busy_pipe = [(identity[k]["Kernel Name"], num(m[PIPE][1])) for k, m in metrics.items()
                     if num(m[PIPE][1]) > 0 and not bool(frame.loc[int(k), "uses_tc"])]
        assert ("softmax_warp_forward", 160) in [(n[n.index("softmax"):][:20], v) for n, v in busy_pipe
                                                 if "softmax" in n]
        assert 960 in [v for n, v in busy_pipe if "splitKreduce_kernel" in n]


def _with_counters(src: Path, out: Path, totals: dict[str, str], hmma: dict[str, str]) -> None:
    """The real CSV plus rows of an instruction total (and an MMA-only sub-pipe count) for some kernels."""
    header, _, identity = raw_counters(src)
    with out.open("w", newline="") as fh:
        fh.write(src.read_text())
        w = csv.writer(fh, quoting=csv.QUOTE_ALL)
        for metric, values in ((TOTALS[0], totals), (HMMA, hmma)):
            for kid, value in values.items():
                rec = {**identity[kid], "Section Name": "Command line profiler metrics", "Metric Name": metric,
                       "Metric Unit": "inst", "Metric Value": value, "Rule Name": "", "Rule Type": "",
                       "Rule Description": ""}
                w.writerow([rec.get(col, "") for col in header])


def test_the_tensor_share_of_executed_instructions_decides_when_the_csv_has_a_total(tmp_path):
    src = data_file("ncu_csv", "leleucas_bert_attention_pytorch_ampere.csv")
    _, metrics, _ = raw_counters(src)
    ids = sorted(metrics, key=int)
    totals = {kid: f"{[10_000, 2_000, 40_000, 5_000][i % 4]:,}" for i, kid in enumerate(ids) if i % 5 != 4}
    hmma = {kid: "0" for kid in ids[::3]}                 # MMA-only counter present: it wins over the pipe
    path = tmp_path / "with_totals.csv"
    _with_counters(src, path, totals, hmma)
    threshold = json.loads(Path(dlscope.__file__).with_name("data").joinpath("ncu_tensor_core.json")
                           .read_text())["min_tensor_share"]
    _, metrics, _ = raw_counters(path)                     # the file as written, read back with the csv module
    frame = read_ncu_csv(path).set_index("kernel_id")
    decided = {"counters": 0, "name": 0}
    for kid, m in metrics.items():
        row = frame.loc[int(kid)]
        if TOTALS[0] not in m:
            assert row["uses_tc_source"] == "name" and math.isnan(row["tensor_share"])
            decided["name"] += 1
            continue
        mma = num(m[HMMA][1]) if HMMA in m else num(m[PIPE][1])
        share = mma / num(m[TOTALS[0]][1])
        assert row["tensor_share"] == pytest.approx(share, rel=1e-12, abs=0)
        assert row["uses_tc_source"] == "counters" and bool(row["uses_tc"]) == (share >= threshold)
        decided["counters"] += 1
    assert decided["counters"] >= 15 and decided["name"] >= 4
    counted = frame[frame["uses_tc_source"] == "counters"]
    assert counted["uses_tc"].any() and not counted["uses_tc"].all()   # both outcomes exercised


def test_a_database_from_before_the_verdict_gets_its_columns(tmp_path):
    import sqlite3

    from dlscope.roofline import write_ncu_kernels

    conn = sqlite3.connect(tmp_path / "old.sqlite")
    conn.execute("CREATE TABLE ncu_kernels (ncu_id INTEGER PRIMARY KEY, source TEXT, kernel_id INTEGER, "
                 "process_id INTEGER, kernel_name TEXT, device INTEGER, device_name TEXT, cc TEXT, time_ns REAL, "
                 "time_source TEXT, flops_fp64 REAL, flops_fp32 REAL, flops_fp16 REAL, flops_tensor REAL, "
                 "bytes_l1 REAL, bytes_l2 REAL, bytes_dram REAL, tensor_pipe_inst REAL, cycles REAL, "
                 "cycles_per_second REAL)")
    path = data_file("ncu_csv", "leleucas_bert_attention_flashattn_ampere.csv")
    assert write_ncu_kernels(conn, read_ncu_csv(path), source=path.name) == 10
    rows = conn.execute("SELECT kernel_name, uses_tc, uses_tc_source FROM ncu_kernels ORDER BY kernel_id").fetchall()
    labels = _hand_labels()
    assert [(bool(u), s) for _, u, s in rows] == [
        (labels[hashlib.sha256(n.encode()).hexdigest()] == "tensor_core", "name") for n, _, _ in rows]


def test_fma_share_and_the_ceiling_its_mix_allows(tmp_path):
    """FMA FLOPs (2 per d/f/h FMA thread instruction) over all CUDA-core FLOPs, from the raw counters of the
    eager-PyTorch BERT attention (FP32 sgemm on CUDA cores) read here; an FP32 kernel's mix roof is
    P / (2 - share) and its no-FMA roof P / 2 (ERT's two FP lines)."""
    import sqlite3

    from dlscope.roofline import roofline_report, write_ncu_kernels

    path = data_file("ncu_csv", "leleucas_bert_attention_pytorch_ampere.csv")
    _, metrics, _ = raw_counters(path)
    frame = read_ncu_csv(path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "V100", "fp32_flops": 15.7e12, "fp16_tensor_flops_dense": 125e12,
                                "dram_bandwidth_bytes_per_s": 900e9}))
    conn = sqlite3.connect(tmp_path / "n.sqlite")
    write_ncu_kernels(conn, frame)
    kernels = {k["kernel_id"]: k for k in roofline_report(conn, None, gpu_spec_path=spec)["kernels"]}
    checked = 0
    for kid, m in metrics.items():
        v = {name: num(value) for name, (_, value) in m.items() if name.startswith(PREFIX)}
        fma = sum(2 * v[f"{PREFIX}{p}fma_pred_on.sum"] for p in "dfh")
        total = sum(v[f"{PREFIX}{p}add_pred_on.sum"] + v[f"{PREFIX}{p}mul_pred_on.sum"]
                    + 2 * v[f"{PREFIX}{p}fma_pred_on.sum"] for p in "dfh")
        k = kernels[int(kid)]
        assert frame.set_index("kernel_id").loc[int(kid), "flops_fma"] == fma
        if total == 0:
            assert k["fma_share"] is None
            continue
        assert k["fma_share"] == pytest.approx(fma / total, rel=1e-12)
        if k["precision"] == "fp32" and not k["tensor_cores"]:
            assert k["fma_mix_ceiling_flops_per_s"] == pytest.approx(15.7e12 / (2 - fma / total), rel=1e-12)
            assert k["no_fma_ceiling_flops_per_s"] == 15.7e12 / 2
            checked += 1
    assert checked >= 4


NVTX_PUSH_POP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
NVTX_START_STOP = "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"


def _nvtx(thread: int, *ranges: str, domain: str = "<default domain>") -> str:
    """An ncu --nvtx cell: the thread (or range id), then one quoted domain:name:6 attributes per open range."""
    return f"{thread}  " + "  ".join(f'"{domain}:{name}:none:none:none:none:none:none"' for name in ranges)


def _nvtx_csv(path: Path) -> Path:
    """A long-layout ncu CSV with the two NVTX columns `ncu --nvtx` adds (column names and cell layout as ncu prints
    them; none of the real CSVs in ../shared/data was recorded with --nvtx, so this one is built here)."""
    kernels = [  # ID, name, push/pop cell, start/stop cell, time ns, fadd, fmul, ffma
        (0, "ampere_sgemm_128x64_nn", _nvtx(1, "train_step", "forward"), "", 100_000, 10, 20, 1000),
        (1, "vectorized_elementwise_kernel", _nvtx(1, "train_step", "forward", "layer:0"), "", 50_000, 500, 0, 0),
        (2, "ampere_sgemm_128x64_nt", _nvtx(1, "train_step", "backward"), _nvtx(5, "epoch", domain="MyDomain"),
         200_000, 0, 0, 4000),
    ]
    header = ["ID", "Process ID", "Process Name", "Host Name", NVTX_PUSH_POP, NVTX_START_STOP, "Kernel Name",
              "Context", "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name",
              "Metric Unit", "Metric Value"]
    rows = [header]
    for kid, name, push_pop, start_stop, ns, fadd, fmul, ffma in kernels:
        metrics = {"gpu__time_duration.sum": ("nsecond", ns),
                   **{f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": ("inst", 0)
                      for p in "dh" for op in ("add", "mul", "fma")},
                   "sm__sass_thread_inst_executed_op_fadd_pred_on.sum": ("inst", fadd),
                   "sm__sass_thread_inst_executed_op_fmul_pred_on.sum": ("inst", fmul),
                   "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", ffma)}
        for metric, (unit, value) in metrics.items():
            rows.append([str(kid), "42", "train", "host", push_pop, start_stop, name, "1", "7", "(128, 1, 1)",
                         "(64, 1, 1)", "0", "8.0", "Command line profiler metrics", metric, unit, f"{value:,}"])
    with path.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    return path


def test_nvtx_range_names_of_an_ncu_cell():
    assert nvtx_range_names(_nvtx(1, "train_step", "forward")) == ["train_step", "forward"]
    # a range name may hold colons: the six attributes after it are counted from the end
    cell = '1  "<default domain>:gemma_module:model.layers.0.self_attn:none:none:none:none:none:none"'
    assert nvtx_range_names(cell) == ["gemma_module:model.layers.0.self_attn"]
    assert nvtx_range_names("") == []


def test_counters_are_summed_per_ncu_nvtx_range(tmp_path):
    """Hand sums over the three kernels: FP32 FLOPs = fadd + fmul + 2 × ffma (2,030, 500, 8,000); each kernel
    counts in every range open at its launch (push/pop and start/end), with no trace in the database."""
    import sqlite3

    from dlscope.roofline import roofline_report, write_ncu_kernels

    frame = read_ncu_csv(_nvtx_csv(tmp_path / "nvtx.csv"))
    assert [json.loads(r) for r in frame["nvtx_ranges"]] == [
        ["train_step", "forward"], ["train_step", "forward", "layer:0"], ["train_step", "backward", "epoch"]]
    conn = sqlite3.connect(tmp_path / "n.sqlite")
    write_ncu_kernels(conn, frame)
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps({"name": "A100", "fp32_flops": 19.5e12, "dram_bandwidth_bytes_per_s": 1.555e12}))
    by_range = {r["range_name"]: r for r in roofline_report(conn, None, gpu_spec_path=spec)["counters_by_nvtx"]}
    expected = {"train_step": (3, 10_530, 350_000), "forward": (2, 2_530, 150_000), "layer:0": (1, 500, 50_000),
                "backward": (1, 8_000, 200_000), "epoch": (1, 8_000, 200_000)}
    assert {k: (r["kernels"], r["flops_fp32"], r["time_ns"]) for k, r in by_range.items()} == expected


def test_real_ncu_csvs_without_nvtx_columns_have_no_ranges():
    frame = read_ncu_csv(data_file("ncu_csv", "leleucas_bert_attention_pytorch_ampere.csv"))
    assert frame["nvtx_ranges"].isna().all()
