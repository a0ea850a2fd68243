#!/usr/bin/env python3
"""The Kineto decode alone: CPU seconds to decode (and free) every piece of a plain-JSON trace with the lenient
decoder (every event an ``Event``) and with the phase-typed one the import uses, alternated in one process.

    PYTHONPATH=src python bench/decode_cpu.py TRACE.json [--repeat 4]

Prints per decoder the minimum and every run (CPU of this process; the pieces are cut and copied beforehand).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

from dlscope.importers.kineto import PIECE_BYTES, events, pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    gc.disable()
    text = args.trace.read_bytes()
    cuts = pieces.cut_events(text, PIECE_BYTES)
    if cuts is None:
        raise SystemExit(f"{args.trace}: not a trace whose event array pieces can cut")
    texts = [pieces.bracketed(text, cuts[i], text.rfind(b"}", cuts[i], cuts[i + 1]) + 1)
             for i in range(len(cuts) - 1)]  # the last piece (with the keys after the array) is left out
    decoders = {"lenient": events.BATCH_DECODER.lenient, "by phase": events.BATCH_DECODER}
    runs: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(args.repeat):
        for name, decoder in decoders.items():
            start = time.process_time()
            for piece in texts:
                decoded = decoder.decode(piece)
                del decoded
            runs[name].append(time.process_time() - start)
    print(f"{len(texts)} pieces, {sum(map(len, texts)) / 1e6:.0f} MB: decode and free, CPU s")
    for name, seconds in runs.items():
        print(f"  {name:9s} min {min(seconds):.3f}  runs {' '.join(f'{s:.3f}' for s in seconds)}")


if __name__ == "__main__":
    main()
