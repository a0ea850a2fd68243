"""Small hand-made Kineto traces for tests whose expected numbers are computed by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

PID, TID = 100, 100


class KinetoTrace:
    """Events in microseconds, as the PyTorch profiler writes them."""

    def __init__(self, devices: int = 1):
        self.events: list[dict] = []
        self.device_properties = [{"id": d, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920,
                                   "computeMajor": 8, "computeMinor": 0, "numSms": 108} for d in range(devices)]
        self._corr = 0

    def step(self, n: int, ts: float, end: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": PID,
                            "tid": TID, "ts": ts, "dur": end - ts, "args": {}})

    def annotation(self, name: str, ts: float, end: float, tid: int = TID) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": tid, "ts": ts,
                            "dur": end - ts, "args": {}})

    def op(self, name: str, ts: float, end: float, tid: int = TID, **args) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": ts,
                            "dur": end - ts, "args": args})

    def launch(self, ts: float, end: float, kernel: str, k_ts: float, k_end: float, stream: int = 7,
               device: int = 0, kind: str = "kernel", tid: int = TID, graph: bool = False, **kargs) -> int:
        """A launch call and its GPU activity; ``graph``: the call is a cudaGraphLaunch (the kernel replayed from a
        CUDA graph)."""
        self._corr += 1
        api = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}[kind]
        api = "cudaGraphLaunch" if graph else api
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api, "pid": PID, "tid": tid, "ts": ts,
                            "dur": end - ts, "args": {"correlation": self._corr}})
        self.events.append({"ph": "X", "cat": kind, "name": kernel, "pid": device, "tid": stream, "ts": k_ts,
                            "dur": k_end - k_ts, "args": {"device": device, "stream": stream,
                                                          "correlation": self._corr, **kargs}})
        return self._corr

    def write(self, path: Path) -> Path:
        doc = {"schemaVersion": 1, "deviceProperties": self.device_properties,
               "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": self.events}
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "wt") as f:
            json.dump(doc, f)
        return path
