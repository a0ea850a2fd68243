"""Analytic FLOPs/bytes: hand-computed examples (seed 002), GEMM 2·M·N·K, attention, and torch's counter."""

from __future__ import annotations

import json

import pytest

from dlscope.roofline.flops import op_cost, op_family, precision_of


def test_seed_002_conv_with_bias_worked_example():
    # 3x3 conv with bias, input 1x3x416x480 -> output 1x16x208x240 (stride 2, padding 1), FP32.
    cost = op_cost("aten::conv2d", [[1, 3, 416, 480], [16, 3, 3, 3], [16], [], [], [], []],
                   ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                   ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    assert cost.flops == ((3 * 3) * 3 + 1) * 16 * 208 * 240 * 2 == 44_728_320
    # seed 002: input 2,396,160 B + output 3,194,880 B, plus the 448 parameters at 4 B each.
    assert cost.bytes == 2_396_160 + 3_194_880 + 448 * 4
    assert cost.precision == "fp32" and cost.family == "conv"


def test_same_conv_through_every_layer_of_the_call_stack():
    shapes = [[1, 3, 416, 480], [16, 3, 3, 3], [16]]
    conv = op_cost("aten::convolution", json.dumps(shapes + [[]] * 6), None,
                   json.dumps(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]))
    assert conv.flops == 44_728_320
    # cudnn_convolution has no bias argument (the bias is a separate add kernel) and a different order.
    cudnn = op_cost("aten::cudnn_convolution", [[1, 3, 416, 480], [16, 3, 3, 3], [], [], [], [], [], [], []],
                    ["float", "float"] + ["ScalarList"] * 3 + ["Scalar"] * 4,
                    ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    assert cudnn.flops == 2 * 27 * 16 * 208 * 240


def test_grouped_dilated_conv_and_transposed_conv():
    # depthwise 3x3, dilation 2, padding 2: out = (32 + 4 - 2*2 - 1)//1 + 1 = 32
    dw = op_cost("aten::convolution", [[2, 8, 32, 32], [8, 1, 3, 3], [], [], [], [], [], [], []],
                 ["c10::Half", "c10::Half", ""], ["", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "8"])
    assert dw.flops == 2 * 2 * 8 * 32 * 32 * (1 * 9)
    assert dw.precision == "fp16"
    assert dw.bytes == 2 * (2 * 8 * 32 * 32 + 8 * 9 + 2 * 8 * 32 * 32)
    # transposed: x [1,4,5,5], w [4,2,3,3], stride 2 -> out (5-1)*2 - 0 + 2 + 0 + 1 = 11
    tr = op_cost("aten::convolution", [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], [], []],
                 ["float", "float", ""], ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"])
    assert tr.flops == 2 * 1 * 4 * 25 * 2 * 9
    assert tr.bytes == 4 * (100 + 72 + 1 * 2 * 11 * 11)


def test_conv_backward_respects_output_mask_and_groups():
    shapes = [[2, 4, 3, 5], [2, 8, 6, 10], [4, 4, 3, 3], [], [], [], [], [], [], [], []]
    concrete = ["", "", "", "[4]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2", "[True, True, False]"]
    cost = op_cost("aten::convolution_backward", shapes, ["float"] * 3, concrete)
    macs = 2 * 4 * 3 * 5 * 4 * 9                      # N·K·prod(out)·(C/g)·prod(kernel)
    assert cost.flops == 2 * macs * 2                  # grad_input + grad_weight
    assert cost.bytes == 4 * ((120 + 960 + 144) + (960 + 144))
    only_input = op_cost("aten::convolution_backward", shapes, ["float"] * 3,
                         concrete[:-1] + ["[True, False, True]"])
    assert only_input.flops == 2 * macs + 2 * 4 * 15   # grad_input + bias reduction (one add per element)


@pytest.mark.parametrize("name, shapes, expected", [
    ("aten::mm", [[64, 32], [32, 16]], 2 * 64 * 16 * 32),
    ("aten::bmm", [[8, 64, 32], [8, 32, 16]], 2 * 8 * 64 * 16 * 32),
    ("aten::matmul", [[3, 8, 64, 32], [32, 16]], 2 * 24 * 64 * 16 * 32),
    ("aten::matmul", [[32], [32, 16]], 2 * 1 * 16 * 32),
    ("aten::linear", [[4, 197, 768], [3072, 768], []], 2 * 788 * 3072 * 768),
])
def test_gemm_is_2mnk(name, shapes, expected):
    cost = op_cost(name, shapes, ["c10::BFloat16"] * len(shapes))
    assert cost.flops == expected and cost.precision == "bf16"


def test_gemm_with_bias_adds_one_multiply_add_per_output():
    # addmm(bias, A, B): beta·C + alpha·A@B -> 2·M·N·K + 2·M·N (seed 002's bias convention).
    cost = op_cost("aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []],
                   ["c10::BFloat16"] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    assert cost.flops == 2 * 8944 * 1024 * (1024 + 1)
    assert cost.bytes == 2 * (1024 + 8944 * 1024 + 1024 * 1024 + 8944 * 1024)
    linear = op_cost("aten::linear", [[4, 197, 768], [768, 768], [768]], ["float"] * 3)
    assert linear.flops == 2 * 788 * 768 * 769


def test_attention_forward_backward_and_causal_halving():
    b, h, s, d = 16, 16, 559, 64
    fwd = 4 * b * h * s * s * d                           # QKᵀ and PV, 2 FLOPs per multiply-add
    # _flash_attention_forward takes [B, S, H, D]; causal flag at Concrete Inputs[8].
    shapes = [[b, s, h, d]] * 3 + [[]] * 12
    types = ["c10::BFloat16"] * 3 + [""] * 12
    causal = ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""]
    not_causal = causal[:8] + ["False"] + causal[9:]
    assert op_cost("aten::_flash_attention_forward", shapes, types, not_causal).flops == fwd
    assert op_cost("aten::_flash_attention_forward", shapes, types, causal).flops == fwd // 2
    out = op_cost("aten::_flash_attention_forward", shapes, types, causal)
    assert out.bytes == 2 * 4 * b * h * s * d               # Q, K, V in; O out
    # SDPA wrapper takes [B, H, S, D]; causal at [4].
    sdpa = op_cost("aten::_scaled_dot_product_flash_attention", [[b, h, s, d]] * 3 + [[]] * 4, types[:7],
                   ["", "", "", "0.", "True", "False", "0.125"])
    assert sdpa.flops == fwd // 2
    bwd_shapes = [[b, h, s, d]] * 5 + [[b, h, s]] + [[]] * 9
    bwd_concrete = [""] * 11 + ["False"] + [""] * 3
    bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward", bwd_shapes,
                  ["c10::BFloat16"] * 5 + ["float"] + [""] * 9, bwd_concrete)
    assert bwd.flops == fwd * 5 // 2                        # five matmuls to the forward's two
    bwd_causal = op_cost("aten::_scaled_dot_product_flash_attention_backward", bwd_shapes,
                         ["c10::BFloat16"] * 5 + ["float"] + [""] * 9, [""] * 11 + ["True"] + [""] * 3)
    assert bwd_causal.flops == fwd * 5 // 4
    assert bwd.bytes == 2 * (5 * b * h * s * d + 3 * b * h * s * d) + 4 * b * h * s


def test_cross_attention_is_not_halved_and_gqa_uses_query_heads():
    q, kv = [2, 8, 1, 64], [2, 8, 300, 64]
    cost = op_cost("aten::_scaled_dot_product_efficient_attention", [q, kv, kv, [], [], [], [], []],
                   ["float"] * 3, ["", "", "", "", "True", "0.", "True", ""])
    assert cost.flops == 4 * 2 * 8 * 1 * 300 * 64


def test_norm_softmax_elementwise_reduction_and_copies():
    ln = op_cost("aten::native_layer_norm", [[4, 197, 768], [], [768], [768], []],
                 ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"])
    n = 4 * 197 * 768
    assert ln.flops == 7 * n and ln.bytes == 2 * (n + 768 + 768 + n)
    bn_eval = op_cost("aten::native_batch_norm", [[8, 64, 16, 16], [64], [64], [64], [64], [], [], []],
                      ["float"] * 5 + ["Scalar"] * 3, ["", "", "", "", "", "False", "0.1", "1e-05"])
    assert bn_eval.flops == (2 + 2) * 8 * 64 * 256
    sm = op_cost("aten::_softmax", [[8, 12, 128, 128], [], []], ["c10::Half", "Scalar", "Scalar"])
    assert sm.flops == 3 * 8 * 12 * 128 * 128 and sm.bytes == 2 * 2 * 8 * 12 * 128 * 128
    add = op_cost("aten::add", [[4, 197, 768], [1, 197, 768], []], ["float", "float", "Scalar"], ["", "", "1"])
    assert add.flops == n and add.bytes == 4 * (n + 197 * 768 + n)
    total = op_cost("aten::sum", [[4, 197, 768], [], [], []], ["float", "ScalarList", "Scalar", ""],
                    ["", "[-1]", "False", ""])
    assert total.flops == n and total.bytes == 4 * (n + 4 * 197)
    copy = op_cost("aten::copy_", [[1024, 1024], [1024, 1024], []], ["c10::Half", "float", "Scalar"])
    assert copy.flops == 0 and copy.bytes == 4 * 1024 * 1024 + 2 * 1024 * 1024   # destination not read


def test_unknown_ops_and_bad_shapes_give_none():
    assert op_cost("aten::nonexistent_op", [[1, 2]], ["float"]) is None
    assert op_family("MyCustomOp") is None
    assert op_cost("aten::mm", "", "") is None                # shapes not recorded
    assert op_cost("aten::mm", "not json", "") is None
    assert op_cost("aten::conv2d", [[1, 3, 2, 2], [16, 3, 5, 5]], ["float", "float"]) is None  # empty output


@pytest.mark.parametrize("dtype, precision", [("float", "fp32"), ("c10::Half", "fp16"), ("c10::BFloat16", "bf16"),
                                              ("float32", "fp32"), ("bfloat16", "bf16"), ("double", "fp64"),
                                              ("c10::Float8_e4m3fn", "fp8"), ("signed char", "int8"),
                                              ("long int", None), ("ScalarList", None)])
def test_precision_from_dtype(dtype, precision):
    assert precision_of(dtype) == precision


@pytest.mark.slow
def test_agrees_with_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(2, 8, 6, 10, requires_grad=True)
    w = torch.randn(4, 8, 3, 3, requires_grad=True)
    a, b = torch.randn(8, 64, 32), torch.randn(8, 32, 16)
    with FlopCounterMode(display=False) as counter:
        y = torch.nn.functional.conv2d(x, w, stride=2, padding=1)
        y.sum().backward()
        torch.bmm(a, b)
    counts = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    fwd = op_cost("aten::convolution", [[2, 8, 6, 10], [4, 8, 3, 3], []] + [[]] * 6, ["float"] * 2,
                  ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"])
    bwd = op_cost("aten::convolution_backward", [list(y.shape), [2, 8, 6, 10], [4, 8, 3, 3]] + [[]] * 8,
                  ["float"] * 3, ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                                  "[True, True, False]"])
    bmm = op_cost("aten::bmm", [[8, 64, 32], [8, 32, 16]], ["float", "float"])
    assert fwd.flops == counts["aten.convolution"]
    assert bwd.flops == counts["aten.convolution_backward"]
    assert bmm.flops == counts["aten.bmm"]


@pytest.mark.parametrize("size, kernel, stride, padding, ceil", [
    (64, 2, 2, 0, False), (7, 3, 2, 1, True), (8, 3, 2, 0, True), (7, 3, 3, 0, False), (112, 3, 2, 1, False)])
def test_max_pool_output_is_torchs_and_its_flops_one_compare_per_window_element(size, kernel, stride, padding, ceil):
    torch = pytest.importorskip("torch")
    y = torch.nn.functional.max_pool2d(torch.zeros(2, 3, size, size), kernel, stride, padding, 1, ceil)
    args = ([[2, 3, size, size], [], [], [], [], []], ["float"] + ["ScalarList"] * 4 + ["Scalar"],
            ["", f"[{kernel}, {kernel}]", f"[{stride}, {stride}]", f"[{padding}, {padding}]", "[1, 1]", str(ceil)])
    cost = op_cost("aten::max_pool2d", *args)
    assert cost.family == "pool" and cost.flops == y.numel() * kernel * kernel
    assert cost.bytes == 4 * (2 * 3 * size * size + y.numel())
    # with indices: the int64 indices are written too
    assert op_cost("aten::max_pool2d_with_indices", *args).bytes == cost.bytes + 8 * y.numel()


def test_max_pool_without_its_recorded_geometry_or_stride_defaulting_to_the_kernel():
    shapes = [[1, 1, 7, 7], [], [], [], [], []]
    assert op_cost("aten::max_pool2d", shapes, ["float"] * 6, None) is None   # torch < 2.1: nothing recorded
    # stride=[] (the default) is the kernel size: 7 // 3 = 2 outputs a side
    cost = op_cost("aten::max_pool2d", shapes, ["float"] * 6, ["", "[3, 3]", "[]", "[0, 0]", "[1, 1]", "False"])
    assert cost.flops == 2 * 2 * 9


def test_max_pool_backward_adds_each_gradient_element_once():
    cost = op_cost("aten::max_pool2d_with_indices_backward",
                   [[64, 128, 16, 16], [64, 128, 32, 32], [], [], [], [], [], [64, 128, 16, 16]],
                   ["float", "float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "long int"],
                   ["", "", "[2, 2]", "[2, 2]", "[0, 0]", "[1, 1]", "False", ""])
    dy, x = 64 * 128 * 16 * 16, 64 * 128 * 32 * 32
    assert (cost.family, cost.flops) == ("pool_bwd", dy)
    assert cost.bytes == 4 * dy + 4 * x + 8 * dy + 4 * x       # grad_output, self, int64 indices read; dx written


def test_a_foreach_op_is_elementwise_over_its_first_tensor_list():
    params = [[64, 3, 3, 3], [64], [10, 1024]]
    n = 64 * 27 + 64 + 10 * 1024
    cost = op_cost("aten::_foreach_add_", [params, params, []], ["TensorList", "TensorList", "Scalar"], ["", "", "1"])
    assert (cost.family, cost.flops) == ("elementwise", n)
    assert cost.bytes == 4 * 3 * n                               # two lists read, one written (4 B: no dtype recorded)


def test_a_convolution_without_recorded_geometry_takes_the_output_it_is_given():
    shapes = [[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], []]
    assert op_cost("aten::conv2d", shapes, ["float", "float"]) is None
    cost = op_cost("aten::conv2d", shapes, ["float", "float"], None, "[8,32,16,16]")
    assert cost.flops == 2 * 8 * 32 * 16 * 16 * 16 * 9
    # an output that does not fit the weight's channels or the batch is not taken
    assert op_cost("aten::conv2d", shapes, ["float", "float"], None, "[8,64,16,16]") is None
    assert op_cost("aten::conv2d", shapes, ["float", "float"], None, "[4,32,16,16]") is None


@pytest.mark.parametrize("shapes", [[[2 ** 40, 2 ** 40], [2 ** 40, 2 ** 40]],      # 2^121 FLOPs: int64 would wrap
                                    [[-64, 32], [32, 16]]])                        # a negative dimension
def test_absurd_shapes_have_no_model(shapes):
    from dlscope.roofline.flops import model_flops

    assert op_cost("aten::mm", shapes, ["float", "float"]) is None
    assert model_flops("aten::mm", shapes, ["float", "float"]) is None
