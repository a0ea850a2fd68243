"""The kernel-name precision classifier (data/kernel_precision.json): kernel names as profilers record them,
each with the precision its library documents (cuBLAS/CUTLASS/cuDNN naming, see the data file's sources)."""

from __future__ import annotations

import pandas as pd
import pytest

from dlscope.experts.precision_names import (
    dominant,
    kernel_precision,
    kernel_precisions,
    math_mode,
)

NAMES = {
    # FP32 on CUDA cores: the families named in issue 13, item 7
    "volta_sgemm_128x64_nn": "fp32",
    "ampere_sgemm_32x32_sliced1x4_tn": "fp32",
    "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1": "fp32",
    "cudnn_infer_volta_scudnn_128x64_relu_medium_nn_v1": "fp32",
    "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)": "fp32",
    "void cudnn::detail::implicit_convolve_sgemm<float, float, (int)1024, (int)5>(int)": "fp32",
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel_"
     "_5x_cublas"): "fp32",
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_"
     "align1::Params)"): "fp32",
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false, cublasGemvTensorStridedBatched<float const> "
     ">(int)"): "fp32",
    ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<"
     "float, float>)"): "fp32",
    "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int)": "fp32",
    "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int)": "fp32",
    # TF32 Tensor Cores
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_"
     "g1_tensor16x8x8_execute_kernel_cudnn"): "tf32",
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>("
     "cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)"): "tf32",
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_nhwc_align4>("
     "int)"): "tf32",
    "ampere_tf32_s1688gemm_tf32_128x128_ldg8_f2f_stages_32x3_nn": "tf32",
    "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionENS_10tfloat32_tE": "tf32",
    # a CUTLASS convolution names cutlass::epilogue in its template arguments; that does not make it a helper
    # (a kernel of the A100 NCCL trace in ../shared/data, its name cut short after the epilogue)
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemm"
     "MultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS_10tfloat32_tENS_8epilogue11threadblock8EpilogueIS8_S1F_"
     "Li1EEEEEvNT_6ParamsE"): "tf32",
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1, cutlass::epilogue::thread::LinearCombination<"
     "float> >(int)"): "fp32",
    # 16-bit, 8-bit, 64-bit
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": "fp16",
    "volta_h884gemm_64x64_ldg8_nn": "fp16",
    "volta_s884gemm_fp16_128x128_ldg8_f2f_nn": "fp16",
    "void gemmSN_NN_kernel<__half, 128, 2, 4, 8, 3, 4>(int)": "fp16",
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas"): "bf16",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>(int)": "bf16",
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t> >(int)"): "bf16",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>(int)": "fp8",
    "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128": "fp8",
    # trtllm-gen (TensorRT-LLM) kernels of a B200 vLLM MoE (../shared/data): MXFP4 x MXFP8 and FP8 attention
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_"
     "biasM_bN_tmaOpt_clmp_dynBatch_sm100f"): "fp8",
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_"
     "biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f"): "fp8",
    "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext": "fp8",
    # both operands in FP4 (E2m1): Blackwell's FP4 rate, whatever the output type
    "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s6_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f": "fp4",
    "bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s6_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f": "fp4",
    "bmm_E4m3_E2m1E2m1_Fp32_t128x8x512u2_s6_et128x8_m128x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f": "fp4",
    # CUTLASS block-scaled NVFP4: ue4m3 is the scale factors' type, not an operand's
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm100TmaUmmaWarpSpecializedBlockScaled, "
     "cute::tuple<cutlass::nv_float4_t<cutlass::float_e2m1_t>, cutlass::float_ue4m3_t> > >(int)"): "fp4",
    # trtllm-gen FP16: the mixed-case type token
    "bmm_Fp16_Fp16Fp16_Fp32_t128x128x64_s4_et64x128_m128x128x16_cga1x1x1_16dp256b_TN_schedS_sm100f": "fp16",
    "turing_int8_i8816gemm_128x128_nn": "int8",
    "ampere_dgemm_64x64_nn": "fp64",
    # not math kernels, or names that do not tell
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, "
     "3> >(int)"): "",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct)": "",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(int)": "",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long)": "",
    "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float>(at::fbgemm_gpu)": "",
    "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*)": "",
    "sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average_FastDiv_CAlign8_execute_kernel_trt": "",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN": "",
    "triton_poi_fused_addmm_gelu_view_15": "",
    # cuBLASLt's epilogue kernel (bias, activation after a GEMM): float operands, but not the GEMM
    ("void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, "
     "int, float*, long, void*, long, long, long, float*, long, int*)"): "",
    "": "",
}


@pytest.mark.parametrize("name,expected", NAMES.items(), ids=[n[:60] or "empty" for n in NAMES])
def test_kernel_precision_from_name(name, expected):
    assert kernel_precision(name) == expected


def test_column_classification_matches_one_by_one():
    names = pd.Series(list(NAMES) * 3 + [None])
    got = kernel_precisions(names)
    assert list(got) == [NAMES[n] for n in list(NAMES) * 3] + [""]


def test_math_mode_and_dominant():
    assert math_mode("fp32", True) == "tf32" and math_mode("fp32", False) == "fp32"
    assert math_mode("bf16", True) == "bf16"
    assert dominant(["fp32", "tf32", "", "tf32"], [10, 20, 1000, 30]) == ("tf32", pytest.approx(50 / 60))
    assert dominant(["", ""], [1, 2]) == ("", 0.0)
