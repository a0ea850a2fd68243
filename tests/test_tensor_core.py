"""Tensor Core verdicts on a hand-labelled list of real kernel names, and op eligibility."""

from __future__ import annotations

import pytest

from dlscope.analyze.tensor_core import kernel_uses_tc, op_type_tc_eligible

# (kernel name as it appears in traces, uses Tensor Cores?) — labelled by hand from the instruction tile
# shapes and types in the names (h884/s1688/16816 MMA shapes, tensorop, wgmma/gmma, nvjet, flash attention)
LABELLED = [
    ("volta_h884gemm_64x64_ldg8_nn", True),
    ("volta_s884cudnn_fp16_128x128_ldg8_wgrad_exp_interior_nhwc_nt", True),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_nn", True),
    ("ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", True),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage5_warpsize2x2x1_tensor16x8x16_kernel", True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", True),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", True),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)", True),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)", True),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, false, true>(Flash_fwd_params)", True),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8>>(Flash_bwd_params)", True),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>::Params)", True),
    ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", False),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_warpgroupsize1x1x1_ffma_execute_kernel", False),
    ("volta_sgemm_128x64_tn", False),
    ("ampere_sgemm_64x32_sliced1x4_nn", False),
    ("cutlass_simt_sgemm_128x128_8x2_nn_align1", False),
    ("void cudnn::detail::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, true, false, true>(int, int)", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)", False),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(int)", False),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", False),
    ("triton_poi_fused_add_cos_sin_0", False),
    ("Memcpy HtoD (Pageable -> Device)", False),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 2, 2>(cublasGemmSmallNParams<float const, float const, float, float>)", False),
]


@pytest.mark.parametrize("name,expected", LABELLED, ids=[n[:40] for n, _ in LABELLED])
def test_kernel_tensor_core_verdict_matches_hand_label(name, expected):
    assert kernel_uses_tc(name) is expected


@pytest.mark.parametrize("op_type", ["aten::conv2d", "aten::addmm", "aten::mm", "aten::bmm", "aten::linear",
                                     "aten::_scaled_dot_product_flash_attention", "aten::cudnn_convolution",
                                     "ConvolutionBackward0", "AddmmBackward0", "conv2d", "MatMul", "Conv2DBackpropFilter",
                                     "aten::lstm", "aten::convolution_backward"])
def test_gemm_conv_attention_rnn_ops_are_tc_eligible(op_type):
    assert op_type_tc_eligible(op_type)


@pytest.mark.parametrize("op_type", ["aten::relu", "aten::add", "aten::copy_", "aten::native_batch_norm",
                                     "aten::softmax", "Optimizer.step#SGD.step", "ReluBackward0", "aten::empty"])
def test_elementwise_and_bookkeeping_ops_are_not_tc_eligible(op_type):
    assert not op_type_tc_eligible(op_type)
