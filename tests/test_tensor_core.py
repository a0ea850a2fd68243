"""Tensor Core verdicts on hand-labelled kernel names, op eligibility, and the words for AMD matrix cores.

The oracle for kernel names is ``tests/data/tensor_core_labels.json``: every distinct kernel name of the real
profiles in shared/data, labelled by hand from what the name says (MMA shape or class, library, dtype). The
names are collected here straight from the raw files (JSON, SQLite, CSV), not through dlscope's importers.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import DATA, data_file

from dlscope.analyze.tensor_core import (
    classify_names,
    kernel_uses_tc,
    matrix_units,
    op_type_tc_eligible,
    rank_matrix_units,
)

LABELS_FILE = Path(__file__).parent / "data" / "tensor_core_labels.json"
MIN_RECALL = 0.99

# (kernel name as it appears in traces, uses Tensor Cores?) — labelled by hand from the instruction tile
# shapes and types in the names (h884/s1688/16816 MMA shapes, tensorop, wgmma/gmma, nvjet, flash attention)
LABELLED = [
    ("volta_h884gemm_64x64_ldg8_nn", True),
    ("volta_s884cudnn_fp16_128x128_ldg8_wgrad_exp_interior_nhwc_nt", True),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_nn", True),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", True),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage5_warpsize2x2x1_tensor16x8x16_kernel", True),
    (("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_"
      "cublas"), True),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", True),
    (("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>("
      "cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)"), True),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)", True),
    (("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, "
      "true>(Flash_fwd_params)"), True),
    (("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, "
      "8>>(Flash_bwd_params)"), True),
    (("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
      "cutlass::bfloat16_t>::Params)"), True),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", True),
    # new families: CUTLASS warp-level MMA classes (also mangled), FA3, FP8/FP4 GEMMs, AMD matrix cores
    (("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaMultistage<"
      "cutlass::gemm::GemmShape<128, 128, 32>, "
      "cutlass::gemm::threadblock::MmaPolicy<cutlass::gemm::warp::MmaTensorOp<cutlass::gemm::GemmShape<64, 64, 32>, "
      "cutlass::half_t>>>>>"), True),
    (("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<"
      "cutlass::gemm::GemmShape<128, 128, 32>, "
      "cutlass::gemm::threadblock::MmaPolicy<cutlass::gemm::warp::MmaVoltaTensorOp<cutlass::gemm::GemmShape<64, 64, "
      "32>>>>>>"), True),
    (("_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock14MmaMultistageENS1_4warp11MmaTensorOpEEEEEvNT_"
      "6ParamsE"), True),
    (("void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<cutlass::bfloat16_t>>>("
      "Params)"), True),
    (("void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 176, 12, 2, false, 1, cutlass::half_t, 128>, "
      "false>(Params)"), True),
    (("void cutlass::device_kernel<moe::grouped::fp8_blockwise::GemmKernel>("
      "moe::grouped::fp8_blockwise::GemmKernel::Params)"), True),
    (("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s8_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_noShflA_dsFp8_schedS_"
      "sm100a"), True),
    (("void fmha_fwd_loop_kernel<FMHA_kernel_traits<256, 64, 16, 1, 4, 8, __half>, true, false, "
      "false>(FMHA_fprop_params)"), True),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_GRVW8_ISA942", True),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::half_t>>(ck::Argument)", True),
    ("igemm_fwd_gtcx2_nhwc_fp16_bx0_ex1_bt256x128x32_wt32x32x8_ws2x1_wr2x2_gkgs", True),
    ("attn_fwd", True),
    # CUDA-core GEMMs, auxiliary kernels of MMA libraries, and elementwise kernels with half/bf16 types
    (("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
      "kernel__5x_cublas"), False),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_warpgroupsize1x1x1_ffma_execute_kernel", False),
    ("volta_sgemm_128x64_tn", False),
    ("ampere_sgemm_64x32_sliced1x4_nn", False),
    ("cutlass_simt_sgemm_128x128_8x2_nn_align1", False),
    (("void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaMultistage<"
      "cutlass::gemm::GemmShape<128, 128, 8>, "
      "cutlass::gemm::threadblock::MmaPolicy<cutlass::gemm::warp::MmaSimt<cutlass::gemm::GemmShape<32, 64, 8>, "
      "float>>>>>"), False),
    (("void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, true, false, true>(int, "
      "int)"), False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)", False),
    (("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
      "float>>>(int)"), False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>>(int)", False),
    (("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, "
      "cutlass::bfloat16_t, 4, true> >(Params)"), False),
    (("void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 10, false, "
      "false>(c10::Half*)"), False),
    (("void splitKreduce_kernel<32, 16, int, __half, __half, float, __half, true, true, "
      "false>(cublasSplitKParams<float>)"), False),
    (("void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cutlass::bfloat16_t, float, "
      "cutlass::arch::Sm90>>(Params)"), False),
    (("void cutlass::device_kernel<flash::FlashAttnBwdPostprocessConvertdQ<cutlass::bfloat16_t, float, "
      "cutlass::arch::Sm90, "
      "cute::TiledMMA<cute::MMA_Atom<cute::SM90_64x96x16_F32BF16BF16_SS<cute::GMMA::Major::K>>>>>(Params)"), False),
    (("void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t>, "
      "4, 1, true>(Params)"), False),
    ("void fmha_bwd_dot_do_o_kernel<FMHA_kernel_traits<128, 64, 16, 1, 8, 8, __half>>(FMHA_dgrad_params)", False),
    ("SubTensorOpWithScalar1d", False),
    ("void ck::kernel_gemm_dl_v1r3<ck::GridwiseGemmDl_km_kn_mn_v1r3<ck::half_t>>(ck::Argument)", False),
    ("igemm_fwd_gtc_nchwc_fp16_bx0_ex0_bt128x128x32", False),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", False),
    ("triton_poi_fused_add_cos_sin_0", False),
    ("Memcpy HtoD (Pageable -> Device)", False),
    (("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 2, 2>(cublasGemmSmallNParams<float const, float const, float, "
      "float>)"), False),
    ("void gemv2T_kernel_val<int, int, __half, __half, float, 128, 16, 4, 4, false, false>(cublasGemvParams)", False),
]


@pytest.mark.parametrize("name,expected", LABELLED, ids=[n[:40] for n, _ in LABELLED])
def test_kernel_tensor_core_verdict_matches_hand_label(name, expected):
    assert kernel_uses_tc(name) is expected


@pytest.mark.parametrize("op_type", ["aten::conv2d", "aten::addmm", "aten::mm", "aten::bmm", "aten::linear",
                                     "aten::_scaled_dot_product_flash_attention", "aten::cudnn_convolution",
                                     "ConvolutionBackward0", "AddmmBackward0", "conv2d", "MatMul",
                                     "Conv2DBackpropFilter",
                                     "aten::lstm", "aten::convolution_backward"])
def test_gemm_conv_attention_rnn_ops_are_tc_eligible(op_type):
    assert op_type_tc_eligible(op_type)


@pytest.mark.parametrize("op_type", ["aten::relu", "aten::add", "aten::copy_", "aten::native_batch_norm",
                                     "aten::softmax", "Optimizer.step#SGD.step", "ReluBackward0", "aten::empty"])
def test_elementwise_and_bookkeeping_ops_are_not_tc_eligible(op_type):
    assert not op_type_tc_eligible(op_type)


# ----------------------------------------------------------------- every kernel name of the real profiles


def _kineto_names(path: Path) -> set[str]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return {e["name"] for e in events if isinstance(e, dict) and str(e.get("cat", "")).lower() == "kernel"}


def _nsys_names(path: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        names: set[str] = set()
        for col in ("demangledName", "shortName") if columns else ():
            if col in columns:
                names |= {r[0] for r in conn.execute(
                    f"SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.{col}")}
        return names
    finally:
        conn.close()


def _ncu_names(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    return {row["Kernel Name"] for row in csv.DictReader(io.StringIO("\n".join(lines[start:])))
            if row.get("Kernel Name")}


def _tf_gpu_stream_names(path: Path) -> set[str]:
    """Complete events on the GPU process's 'Stream #N' rows (kernels and copies), not the TF op rows."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    gpu = {e["pid"] for e in meta if e.get("name") == "process_name" and e["args"]["name"].startswith("/device:GPU")}
    streams = {(e["pid"], e["tid"]) for e in meta if e.get("name") == "thread_name" and e["pid"] in gpu
               and e["args"]["name"].startswith("Stream")}
    return {e["name"] for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in streams}


def shared_kernel_names() -> dict[str, set[str]]:
    """Every distinct kernel name in shared/data -> the files it occurs in."""
    readers = (("kineto/**/*.json.gz", _kineto_names), ("nsys_sqlite/*.sqlite", _nsys_names),
               ("ncu_csv/*.csv", _ncu_names), ("tf_trace/*.trace.json.gz", _tf_gpu_stream_names))
    out: dict[str, set[str]] = {}
    for pattern, read in readers:
        for path in sorted(DATA.glob(pattern)):
            for name in read(path):
                out.setdefault(name, set()).add(str(path.relative_to(DATA)))
    return out


def load_labels() -> tuple[dict[str, dict], dict]:
    """Hand labels keyed by SHA-256 of the name (plain entries are hashed here too), and the file's header."""
    doc = json.loads(LABELS_FILE.read_text(encoding="utf-8"))
    by_hash = {}
    for entry in doc["labels"]:
        key = entry.get("sha256") or hashlib.sha256(entry["name"].encode("utf-8")).hexdigest()
        assert key not in by_hash, f"duplicate label for {entry.get('name', key)}"
        assert entry["label"] in ("tensor_core", "not") and entry["reason"].strip()
        by_hash[key] = entry
    return by_hash, doc


@pytest.fixture(scope="module")
def shared_names() -> dict[str, set[str]]:
    if not DATA.exists():
        pytest.skip(f"shared/data ({DATA}) is absent: the hand labels cover its kernel names")
    return shared_kernel_names()


@pytest.fixture(scope="module")
def labelled_names(shared_names):
    by_hash, _ = load_labels()
    return shared_names, {n: by_hash.get(hashlib.sha256(n.encode("utf-8")).hexdigest()) for n in shared_names}


def test_the_labels_file_never_spells_out_a_name_found_only_in_unlicensed_files(shared_names):
    by_hash, doc = load_labels()
    none_files = set(doc["none_licensed_files"])
    names = shared_names
    plain = {e["name"] for e in by_hash.values() if "name" in e}
    leaked = [n for n, files in names.items() if files <= none_files and n in plain]
    assert not leaked, f"{len(leaked)} names of NONE-licensed files are stored as text"
    assert none_files <= {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file()}


def test_every_kernel_name_in_the_shared_profiles_has_a_hand_label(labelled_names):
    names, labels = labelled_names
    missing = sorted(n for n, entry in labels.items() if entry is None)
    assert len(names) > 1000, len(names)
    assert not missing, (f"{len(missing)} kernel names have no hand label in {LABELS_FILE.name}; label them "
                         "(name, label, reason; SHA-256 for names of NONE-licensed files):\n"
                         + "\n".join(f"  {n[:160]}  ({min(names[n])})" for n in missing[:30]))


def test_kernel_uses_tc_has_full_precision_and_high_recall_on_the_hand_labels(labelled_names):
    import pandas as pd

    _, labels = labelled_names
    known = [n for n, entry in labels.items() if entry is not None]
    predicted = dict(zip(known, classify_names(pd.Series(known), kernel_uses_tc)))
    truth = {n: labels[n]["label"] == "tensor_core" for n in known}
    tp = sum(predicted[n] and truth[n] for n in known)
    false_pos = sorted(n for n in known if predicted[n] and not truth[n])
    false_neg = sorted(n for n in known if truth[n] and not predicted[n])
    precision = tp / (tp + len(false_pos)) if tp + len(false_pos) else 1.0
    recall = tp / (tp + len(false_neg))
    print(f"\n{len(known)} labelled names, {tp + len(false_neg)} Tensor Core: precision {precision:.4f}, "
          f"recall {recall:.4f}")
    for n in false_pos:
        print(f"  false positive: {n[:150]}  -- label says: {labels[n]['reason']}")
    for n in false_neg:
        print(f"  missed: {n[:150]}  -- label says: {labels[n]['reason']}")
    assert tp + len(false_neg) >= 150          # the labels hold real Tensor Core kernels, not only negatives
    assert precision == 1.0
    assert recall >= MIN_RECALL


# ----------------------------------------------------------------- AMD matrix cores: the words


@pytest.mark.parametrize("names,expected", [
    (["AMD Instinct MI300X"], "Matrix Cores (AMD MFMA)"),
    (["AMD Instinct MI300X", ""], "Matrix Cores (AMD MFMA)"),        # a device known only by its kernels
    (["NVIDIA H100 80GB HBM3"], "Tensor Cores"),
    (["Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB"], "Tensor Cores"),
    ([], "Tensor Cores"),
    ([None, ""], "Tensor Cores"),
    (["AMD Instinct MI300X", "NVIDIA A100-SXM4-80GB"], "Tensor Cores"),
])
def test_a_rank_of_amd_gpus_reads_matrix_cores(names, expected):
    assert matrix_units(names).plural == expected


def test_rank_words_come_from_the_gpus_table():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE gpus (rank INTEGER, device INTEGER, name TEXT)")
    conn.executemany("INSERT INTO gpus VALUES (?, ?, ?)",
                     [(0, 0, "AMD Instinct MI300X"), (0, 2, ""), (1, 0, "NVIDIA H100 80GB HBM3")])
    assert rank_matrix_units(conn, 0).short == "MFMA"
    assert rank_matrix_units(conn, 1).short == "TC"
    assert rank_matrix_units(conn, 7).plural == "Tensor Cores"


def _mi300x_device_name(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["deviceProperties"][0]["name"]


def test_mi300x_trace_uses_matrix_cores_and_says_so(import_db):
    """The MI300X trace: hipBLASLt/CK/MIOpen/AOTriton kernels are matrix-core kernels (hand labels), so no
    'eligible ops not using Tensor Cores' finding, and the summary speaks of AMD matrix cores."""
    from dlscope.present.summary import render_summary, summary_dict

    path = data_file("kineto", "tracelens_mi300x_xdit_sd35_infer.json.gz")
    assert _mi300x_device_name(path).startswith("AMD Instinct")
    db = import_db(path)
    by_hash, _ = load_labels()
    conn = sqlite3.connect(db)
    try:
        stored = dict(conn.execute("SELECT DISTINCT name, uses_tc FROM kernels").fetchall())
    finally:
        conn.close()
    for name, uses in stored.items():
        assert bool(uses) == (by_hash[hashlib.sha256(name.encode()).hexdigest()]["label"] == "tensor_core"), name
    assert sum(stored.values()) >= 30
    summary = summary_dict(db)
    assert summary["aggregation"]["matrix_units"]["plural"] == "Matrix Cores (AMD MFMA)"
    assert "tc_eligible_not_using_tc" not in {f["rule"] for f in summary["findings"]}
    text = render_summary(summary)
    assert "Using Matrix Cores (AMD MFMA)" in text and "Matrix Core kernel efficiency" in text
    assert "Tensor Core" not in text
    assert all("Tensor Core" not in f["problem"] + f["recommendation"] for f in summary["findings"])


def test_nvidia_trace_keeps_tensor_core_words(import_db):
    from dlscope.present.summary import render_summary, summary_dict

    summary = summary_dict(import_db(data_file("kineto", "hta_alexnet_a100_critical_path.json.gz")))
    assert summary["aggregation"]["matrix_units"]["plural"] == "Tensor Cores"
    text = render_summary(summary)
    assert "Tensor Core kernel efficiency" in text and "Using Tensor Cores" in text and "Matrix Core" not in text


def test_classify_names_of_a_categorical_judges_only_the_categories_its_rows_use():
    rx = re.compile(r"ProfilerStep#(\d+)")
    # "aten::mm" is a category no row uses: the verdict (a number from the name) would fail on it
    names = pd.Series(pd.Categorical(["ProfilerStep#7", "ProfilerStep#3", "ProfilerStep#7", "ProfilerStep#12"],
                                     categories=["aten::mm", "ProfilerStep#12", "ProfilerStep#3", "ProfilerStep#7"]))
    seen = []

    def number(n):
        seen.append(n)
        return int(rx.match(n).group(1))

    got = classify_names(names, number, dtype=np.int64)
    assert got.tolist() == [7, 3, 7, 12] and got.dtype == np.int64
    assert sorted(seen) == ["ProfilerStep#12", "ProfilerStep#3", "ProfilerStep#7"]  # each used name once
    # with a missing value, as pd.factorize codes it; and the result equals the per-row verdicts of plain text
    texts = ["ProfilerStep#7", "aten::mm", "ProfilerStep#7"]
    for column in (pd.Series(pd.Categorical(texts)), pd.Series(texts, dtype=object)):
        assert classify_names(column, lambda n: n.startswith("Profiler")).tolist() == [True, False, True]
