"""A small CNN training step for the device session (bench/gpu_session.sh): FP32 or AMP, eager or CUDA graphs,
DataLoader workers 0 or more, so one short GPU session records the variants dlscope's experts compare.

    dlscope profile -o fp32_eager_w0.sqlite -- python bench/gpu_train_step.py
    dlscope profile -o amp_graphs_w4.sqlite -- python bench/gpu_train_step.py --amp --cuda-graphs --workers 4

--cuda-graphs captures the model's forward and backward with ``torch.cuda.make_graphed_callables`` (the loss and
the optimizer stay eager); --whole-step-graph captures the whole FP32 step (forward, loss, backward and the
optimizer's step) as one CUDA graph replayed once a step (PyTorch's whole-network capture), to check what the
`cuda-graphs` what-if predicts for a capture that graphs only the forward and backward. Unprofiled only: the step
has no optimizer.step() call left for a profiler to count. --amp autocasts to FP16 on a GPU (with a GradScaler)
and BF16 on a CPU. Runs on a CPU too (without the graphs), which is how the script is tested where no GPU is lent.
"""

import argparse
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """Random 3×64×64 images made (and lightly augmented) per item, so DataLoader workers have work to take."""

    def __init__(self, length: int, classes: int = 10):
        self.length, self.classes = length, classes

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        image = torch.randn(3, 64, 64, generator=g)
        if index % 2:
            image = image.flip(-1)
        return image, index % self.classes


class Tokens(Dataset):
    """Random token sequences (and next-token targets) for the transformer variant."""

    def __init__(self, length: int, seq: int = 256, vocab: int = 8192):
        self.length, self.seq, self.vocab = length, seq, vocab

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        tokens = torch.randint(self.vocab, (self.seq + 1,), generator=g)
        return tokens[:-1], tokens[1:]


class TinyLM(nn.Module):
    """A small pre-norm transformer language model: under autocast its linears follow FP32 layer norms, the
    case where an op's input dtype and the dtype its math runs at differ."""

    def __init__(self, vocab: int = 8192, width: int = 512, layers: int = 4, heads: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.blocks(self.embed(tokens), mask=mask, is_causal=True)))


def model(classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, classes),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="training steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--amp", action="store_true", help="autocast (FP16 + GradScaler on a GPU, BF16 on a CPU)")
    parser.add_argument("--cuda-graphs", action="store_true", help="replay forward and backward as CUDA graphs")
    parser.add_argument("--whole-step-graph", action="store_true",
                        help="replay the whole FP32 step (optimizer included) as one CUDA graph")
    parser.add_argument("--model", choices=("cnn", "transformer"), default="cnn",
                        help="the small CNN on images, or a small transformer LM on token sequences")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if (args.cuda_graphs or args.whole_step_graph) and device != "cuda":
        print("gpu_train_step.py: CUDA graphs need a GPU (torch sees none)", file=sys.stderr)
        return 2
    if args.whole_step_graph and (args.amp or args.cuda_graphs):
        print("gpu_train_step.py: --whole-step-graph is FP32 and alone (a GradScaler's step syncs on the host)",
              file=sys.stderr)
        return 2
    torch.manual_seed(0)
    lm = args.model == "transformer"
    net = (TinyLM() if lm else model()).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device, enabled=args.amp and device == "cuda")
    data = Tokens(args.steps * args.batch_size) if lm else Images(args.steps * args.batch_size)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False,
                        num_workers=args.workers, pin_memory=device == "cuda", drop_last=True)

    def autocast():
        # cache_enabled=False: required when the autocast region is captured into a CUDA graph
        return torch.autocast(device, dtype=amp_dtype, enabled=args.amp, cache_enabled=False)

    if args.cuda_graphs:
        sample = (torch.randint(8192, (args.batch_size, 256), device=device) if lm
                  else torch.randn(args.batch_size, 3, 64, 64, device=device))
        with autocast():                                     # it warms up on a side stream, then captures
            net = torch.cuda.make_graphed_callables(net, (sample,))

    if args.whole_step_graph:
        return _whole_step_graph(net, optimizer, loader, lm, args)

    start = time.perf_counter()
    steps = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast():
            out = net(x).float()
            loss = nn.functional.cross_entropy(out.flatten(0, -2) if lm else out, y.flatten() if lm else y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)                               # dlscope counts a step at optimizer.step()
        scaler.update()
        steps += 1
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    mode = (f"{args.model} {'amp' if args.amp else 'fp32'} {'graphs' if args.cuda_graphs else 'eager'} "
            f"workers={args.workers}")
    print(f"gpu_train_step ({mode}, {device}): {steps} steps, loss {loss.item():.4f}, "
          f"{1e3 * elapsed / max(steps, 1):.2f} ms/step")
    return 0


def _whole_step_graph(net, optimizer, loader, lm: bool, args) -> int:
    """Warm up on a side stream, capture forward, loss, backward and the optimizer's step once, then replay the
    graph each step after copying the batch into its static inputs."""
    def step_of(x, y):
        out = net(x)
        loss = nn.functional.cross_entropy(out.flatten(0, -2) if lm else out, y.flatten() if lm else y)
        loss.backward()
        optimizer.step()
        return loss

    batches = iter(loader)
    x0, y0 = next(batches)
    static_x, static_y = x0.cuda(), y0.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step_of(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = step_of(static_x, static_y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    steps = 0
    for x, y in batches:
        static_x.copy_(x, non_blocking=True)
        static_y.copy_(y, non_blocking=True)
        graph.replay()
        steps += 1
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"gpu_train_step ({args.model} fp32 whole-step graph workers={args.workers}, cuda): {steps} steps, "
          f"loss {static_loss.item():.4f}, {1e3 * elapsed / max(steps, 1):.2f} ms/step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
