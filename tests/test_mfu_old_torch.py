"""MFU of traces that record shapes but no scalar arguments (torch < 2.1: no ``Concrete Inputs``): a convolution's
stride and padding are unknown there, so its output shape comes from the gradient its backward received (the
autograd sequence number links them), and torch 1.9's fused ``aten::cudnn_convolution_backward`` computes the
gradients whose ops ran beneath it (``roofline.completion``). Oracles: torch's own FLOP counter on a ResNet-50
built by hand from the torchvision architecture the V100 trace ran, and hand-made traces worked by hand."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest
from conftest import data_file, requires_shared
from test_graph_replay_figures import TC_GEMM
from trace_builder import KinetoTrace

from dlscope.pipeline import build_database
from dlscope.present.summary import summary_dict

torch = pytest.importorskip("torch")
FlopCounterMode = pytest.importorskip("torch.utils.flop_counter").FlopCounterMode
nn = torch.nn

BATCH = 32  # the traced step's batch: the first convolution's input is [32, 3, 224, 224]


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 block (stride on the 3×3 convolution, a 1×1 projection where the shape changes)."""

    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
        self.down = None
        if stride != 1 or inplanes != planes * 4:
            self.down = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def resnet50() -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.MaxPool2d(3, stride=2, padding=1)]
    inplanes = 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
            inplanes = planes * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def _counted_training_step() -> tuple[int, Counter]:
    """torch's FLOP count of one forward and backward of the hand-built ResNet-50 (on the meta device: shapes only),
    and the (input, weight) shapes its convolutions received."""
    shapes: Counter = Counter()
    with torch.device("meta"):
        model = resnet50()
        images, labels = torch.randn(BATCH, 3, 224, 224), torch.zeros(BATCH, dtype=torch.long)
    for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d)):
        conv.register_forward_pre_hook(
            lambda m, args: shapes.update([(tuple(args[0].shape), tuple(m.weight.shape))]))
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(model(images), labels).backward()
    return counter.get_total_flops(), shapes


@requires_shared
def test_resnet50_on_torch_1_9_counts_what_torch_flop_counter_counts(import_db):
    path = data_file("kineto", "tbplugin_resnet50_v100_workers0.pt.trace.json.gz")
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    traced = Counter((tuple(e["args"]["Input Dims"][0]), tuple(e["args"]["Input Dims"][1]))
                     for e in events if e["name"] == "aten::cudnn_convolution")
    assert not any("Concrete Inputs" in e.get("args", {}) for e in events)  # stride and padding are not recorded
    flops, shapes = _counted_training_step()
    # the trace ran this architecture: every convolution's input and weight, in every step
    assert traced == Counter({key: count * len(steps) for key, count in shapes.items()})
    aggregation = summary_dict(import_db(path))["aggregation"]
    assert aggregation["mfu"]["model_flops_per_iteration"] == flops
    assert aggregation["mfu_unmodelled"] is None and aggregation["mfu_lower_bound"] is False


def _conv_step(tmp_path, name: str, concrete: list | None, backward: bool):
    """One 1 ms step: aten::conv2d of a [8, 16, 32, 32] input by a [32, 16, 3, 3] weight, stride 2, padding 1
    (output [8, 32, 16, 16]) running a 200 µs Tensor Core kernel; ``concrete``: its recorded scalar arguments;
    ``backward``: then its autograd node (the forward's sequence number 7) with an aten::convolution_backward whose
    grad_output has the output's shape."""
    t = KinetoTrace()
    t.step(1, 0, 1000)
    args = {"Input Dims": [[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], []],
            "Input type": ["float", "float", "", "GenericList", "GenericList", "GenericList", "Int"],
            "Sequence number": 7, "Fwd thread id": 0}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    t.op("aten::conv2d", 10, 60, **args)
    t.launch(20, 30, TC_GEMM, 100, 300)
    if backward:
        t.op("autograd::engine::evaluate_function: ConvolutionBackward0", 400, 500, **{"Sequence number": 7,
                                                                                        "Fwd thread id": 1})
        t.op("aten::convolution_backward", 410, 490, **{
            "Input Dims": [[8, 32, 16, 16], [8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], [], [], [], []],
            "Input type": ["float", "float", "float"] + ["GenericList"] * 8,
            "Concrete Inputs": ["", "", "", "", "", "", "", "", "", "", "[False, True, False]"]})
        t.launch(420, 430, TC_GEMM, 500, 700)
    return summary_dict(build_database([t.write(tmp_path / f"{name}.json")], tmp_path / f"{name}.sqlite",
                                       progress=False))["aggregation"]


FORWARD = 2 * 8 * 32 * 16 * 16 * 16 * 3 * 3  # 2 · N · K · out pixels · C · kernel = 18,874,368
WEIGHT_GRAD = FORWARD                           # the weight gradient does the forward's multiply-adds


def test_a_convolution_with_recorded_stride_is_modelled_from_it(tmp_path):
    aggregation = _conv_step(tmp_path, "recorded", ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"], backward=False)
    assert aggregation["mfu"]["model_flops_per_iteration"] == FORWARD


def test_a_convolution_without_its_stride_takes_its_output_from_its_backward(tmp_path):
    aggregation = _conv_step(tmp_path, "linked", None, backward=True)
    assert aggregation["mfu"]["model_flops_per_iteration"] == FORWARD + WEIGHT_GRAD
    assert aggregation["mfu_unmodelled"] is None


def test_a_convolution_without_its_stride_or_a_backward_is_not_guessed(tmp_path):
    # stride 1 and padding 0 would give a 30×30 output: 3.5 times the work; the convolution is left out instead,
    # and MFU says it is a lower bound
    aggregation = _conv_step(tmp_path, "inference", None, backward=False)
    assert not aggregation["mfu"].get("model_flops_per_iteration")
    assert aggregation["mfu_unmodelled"]["op_nodes"] == [["aten::conv2d", 200_000]]
