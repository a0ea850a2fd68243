"""A small MLP trained with SGD on random data: the quickest thing to profile.

    dlscope profile -o mlp.sqlite -- python examples/mlp.py
"""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(args.batch_size, 256, device=device)
    targets = torch.randint(0, 10, (args.batch_size,), device=device)

    start = time.perf_counter()
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"mlp: {args.steps} steps, loss {loss.item():.4f}, {1e3 * elapsed / args.steps:.2f} ms/step")


if __name__ == "__main__":
    main()
