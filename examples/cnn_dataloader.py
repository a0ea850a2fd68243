"""A small CNN trained from a DataLoader over random images, with a per-step NVTX/profiler range.

    dlscope profile -o cnn.sqlite -- python examples/cnn_dataloader.py --workers 0
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dlscope.capture as capture


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32 * 8 * 8, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    images = torch.randn(args.steps * args.batch_size, 3, 32, 32)
    labels = torch.randint(0, 10, (len(images),))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, pin_memory=device == "cuda")
    model = SmallCNN().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with capture.range("forward_backward"):
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    print(f"cnn: {len(loader)} steps, loss {loss.item():.4f}, {1e3 * elapsed / len(loader):.2f} ms/step")


if __name__ == "__main__":
    main()
