"""An MLP trained with switches for the changes `dlscope whatif` predicts, to record A/B pairs.

    dlscope profile -o slow.sqlite -- python examples/variants.py --sleep-ms 3     # the step waits for data
    dlscope profile -o fast.sqlite -- python examples/variants.py                  # it does not
    dlscope whatif slow.sqlite no-dataloader                                       # predicts fast.sqlite

--sync reads the loss every step (.item(): a host synchronization on a GPU); --optimizer picks Adam as a
loop over parameters (foreach=False) or fused.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    """Random samples that each take ``delay_s`` to "read"."""

    def __init__(self, length: int, features: int, delay_s: float):
        self.length, self.features, self.delay_s = length, features, delay_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if self.delay_s:
            time.sleep(self.delay_s)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=generator), index % 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=14, help="training steps")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8, help="hidden layers (more: more optimizer work)")
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="time each sample takes to load")
    parser.add_argument("--sync", action="store_true", help="read the loss every step (.item())")
    parser.add_argument("--optimizer", choices=["sgd", "adam-loop", "adam-fused"], default="sgd")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = Samples(args.steps * args.batch_size, args.features, args.sleep_ms / 1e3)
    loader = DataLoader(dataset, batch_size=args.batch_size)
    layers: list[nn.Module] = [nn.Linear(args.features, args.hidden), nn.ReLU()]
    for _ in range(args.layers - 1):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(args.hidden, 10)).to(device)
    if args.optimizer == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    else:
        fused = args.optimizer == "adam-fused"
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False, fused=fused or None)

    start = time.perf_counter()
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if args.sync:
            total += loss.item()
    elapsed = time.perf_counter() - start
    print(f"variants: {len(loader)} steps, {1e3 * elapsed / len(loader):.2f} ms/step")


if __name__ == "__main__":
    main()
