"""A Dataset whose __getitem__ sleeps, so data loading dominates: the case more DataLoader workers fix.

    dlscope profile -o slow.sqlite -- python examples/slow_dataset.py --workers 0
    dlscope profile -o fast.sqlite -- python examples/slow_dataset.py --workers 4
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Random samples that each take ``delay_s`` to "read", like a slow disk or heavy decoding."""

    def __init__(self, length: int, features: int, delay_s: float):
        self.length, self.features, self.delay_s = length, features, delay_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=generator), index % 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="training steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--sleep-ms", type=float, default=2.0, help="time each sample takes to load")
    parser.add_argument("--hidden", type=int, default=256, help="width of the model's hidden layers (compute per step)")
    args = parser.parse_args()

    torch.manual_seed(0)
    dataset = SlowDataset(args.steps * args.batch_size, 128, args.sleep_ms / 1e3)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(128, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    start = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    print(f"slow_dataset: {len(loader)} steps with {args.workers} workers, {1e3 * elapsed / len(loader):.2f} ms/step")


if __name__ == "__main__":
    main()
