"""System facts: the machine and software a profile was recorded on (DLProf's System Configuration panel).

Each importer puts what its input says in ``profile.meta["system"]`` under the keys of :data:`FACTS`, never
a guess; the writer stores the job's set in ``dlscope_meta`` under the same keys (:func:`job_facts`); the
viewer, the summary JSON and the HTML report read them from there. The key list lives here only.
"""

from __future__ import annotations

import json
import platform
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: the fact keys, each with its label; ``dlscope_meta`` and the summary JSON's ``system`` use these keys
FACTS: dict[str, str] = {
    "hostname": "Hostname",
    "cpu_model": "CPU Model",
    "os": "OS",
    "gpu_driver_version": "GPU Driver Version",
    "cuda_driver_version": "CUDA Driver Version",    # the newest CUDA the driver supports
    "cuda_runtime_version": "CUDA Version",          # the CUDA the program ran with (runtime / toolkit)
    "cudnn_version": "cuDNN Version",
    "nccl_version": "NCCL Version",
    "framework": "Framework",
    "framework_version": "Framework Version",
    "python_version": "Python Version",
    "nsys_version": "NSys Version",
    "distributed_backend": "Distributed Backend",
    "world_size": "World Size",
}

#: the System Configuration rows after GPU Count / GPU Name(s), in DLProf's order then ours: label -> the facts
#: shown in it, joined by a space ("PyTorch 2.13.0")
PANEL_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CPU Model", ("cpu_model",)), ("GPU Driver Version", ("gpu_driver_version",)),
    ("Framework", ("framework", "framework_version")), ("CUDA Version", ("cuda_runtime_version",)),
    ("CUDA Driver Version", ("cuda_driver_version",)), ("cuDNN Version", ("cudnn_version",)),
    ("NCCL Version", ("nccl_version",)), ("NSys Version", ("nsys_version",)), ("Hostname", ("hostname",)),
    ("OS", ("os",)), ("Python Version", ("python_version",)), ("Distributed Backend", ("distributed_backend",)),
    ("World Size", ("world_size",)),
)


def panel_rows(facts: Mapping[str, Any]) -> list[list]:
    """[label, text] for each row of :data:`PANEL_ROWS` with a known fact; unknown ones are left out."""
    rows = []
    for label, keys in PANEL_ROWS:
        parts = [str(facts[k]) for k in keys if facts.get(k) not in (None, "")]
        if parts:
            rows.append([label, " ".join(parts)])
    return rows


#: longer than any real host name, CPU model or version: a value this long is not one (a hostile or broken input)
MAX_FACT_CHARS = 256


def known(facts: Mapping[str, Any], max_chars: int | None = MAX_FACT_CHARS) -> dict[str, Any]:
    """The facts of :data:`FACTS` that have a value, as text (world_size as an int), in FACTS' order. Only plain
    values count: an object or list where a version belongs says nothing."""
    out: dict[str, Any] = {}
    for key in FACTS:
        value = facts.get(key)
        if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value).strip() \
                or (max_chars is not None and len(str(value)) > max_chars):
            continue
        out[key] = _int_or_none(value) if key == "world_size" else str(value).strip()
    return {k: v for k, v in out.items() if v is not None}


def job_facts(sources: list[dict], fallback: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The facts of a job of one or more sources (their metas), for ``dlscope_meta``.

    A fact every rank that knows it agrees on is stored once; one they disagree on lists the distinct values
    in rank order ("node1, node2"). The host is the one the job uses (the source's ``hostname``: the trace's,
    or torch's trace file name), the world size the job's. ``fallback`` (the capture's facts) fills facts no
    source has: a program captured under nsys says its torch version only there.
    """
    ordered = sorted(sources, key=lambda s: _int_or_none(s.get("rank")) or 0)
    per_source = []
    for source in ordered:
        facts = dict(source.get("system") or {})
        if source.get("hostname"):
            facts["hostname"] = source["hostname"]
        if source.get("world_size"):
            facts["world_size"] = source["world_size"]
        per_source.append(known(facts))
    out: dict[str, str] = {}
    for key in FACTS:
        values = list(dict.fromkeys(str(f[key]) for f in per_source if key in f))
        if values:
            out[key] = ", ".join(values)
    for key, value in known(fallback or {}).items():
        out.setdefault(key, str(value))
    return out


def stored_facts(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a database's ``dlscope_meta``: every key of FACTS, None when unknown (world_size an int
    when the ranks agree on it); a job's list of values may be long."""
    facts = known(meta, max_chars=None)
    if "world_size" not in facts and meta.get("world_size"):
        facts["world_size"] = str(meta["world_size"])  # ranks that disagree: their sizes, listed
    return {key: facts.get(key) for key in FACTS}


# -- version numbers as the tools print them ---------------------------------------------------------------


def cuda_version(value: Any) -> str | None:
    """CUDA's integer encoding (1000 * major + 10 * minor, as cudaRuntimeGetVersion returns it): 12010 -> "12.1"."""
    number = _int_or_none(value)
    if number is None or number <= 0:
        return None
    return f"{number // 1000}.{number % 1000 // 10}"


def cudnn_version(value: Any) -> str | None:
    """cudnnGetVersion's integer: 8902 -> "8.9.2" (1000 * major before cuDNN 9), 90100 -> "9.1.0" (10000 * major)."""
    number = _int_or_none(value)
    if number is None or number <= 0:
        return None
    major_unit = 10000 if number >= 90000 else 1000
    return f"{number // major_unit}.{number % major_unit // 100}.{number % 100}"


def driver_version(value: Any) -> str | None:
    """An NVIDIA driver version as nvidia-smi prints it. nsys before 2023 stores it without the dots
    ("5154304" for 515.43.04, "52510517" for 525.105.17: three digits, the minor, two digits); dotted ones
    are kept as they are."""
    text = str(value or "").strip()
    if re.fullmatch(r"\d{7,8}", text):
        return f"{text[:3]}.{text[3:-2]}.{text[-2:]}"
    return text or None


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        return None


# -- the machine dlscope itself runs on (a capture) -------------------------------------------------------


def this_machine() -> dict[str, str]:
    """The facts of the machine this process runs on, for a capture: host, CPU model, OS, Python, and the
    NVIDIA driver when one is loaded. Read from the OS, never guessed."""
    facts = {"hostname": platform.node(), "cpu_model": _cpu_model(), "os": _os_description(),
             "python_version": platform.python_version(), "gpu_driver_version": _nvidia_driver()}
    return {k: v for k, v in facts.items() if v}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor()


def _os_description() -> str:
    try:
        release = platform.freedesktop_os_release()
    except OSError:
        release = {}
    return release.get("PRETTY_NAME") or f"{platform.system()} {platform.release()}".strip()


def _nvidia_driver() -> str:
    """The version in /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05 …")."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return ""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", first)
    return m.group(1) if m else ""


def torch_facts(torch: Any) -> dict[str, str]:
    """What torch says about itself: version, the CUDA it was built with, cuDNN and NCCL when present."""
    facts = {"framework": "PyTorch", "framework_version": str(torch.__version__)}
    if getattr(torch.version, "cuda", None):
        facts["cuda_runtime_version"] = str(torch.version.cuda)
    try:
        cudnn = cudnn_version(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    except Exception:  # noqa: BLE001 - a broken cuDNN install says nothing, it must not stop the capture
        cudnn = None
    if cudnn:
        facts["cudnn_version"] = cudnn
    try:
        nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - as above
        nccl = None
    if isinstance(nccl, tuple) and nccl:
        facts["nccl_version"] = ".".join(str(n) for n in nccl)
    return facts


#: the top-level key under which a dlscope capture writes its facts into the Kineto trace
TRACE_KEY = "dlscope_system"


def trace_metadata(facts: Mapping[str, Any]) -> str:
    """The JSON value of :data:`TRACE_KEY` (for ``torch.profiler.profile.preset_metadata_json``)."""
    return json.dumps(known(facts))


def environment_facts(env: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Versions an environment states (NGC containers set CUDA_VERSION, CUDNN_VERSION, NCCL_VERSION)."""
    names = {"CUDA_VERSION": "cuda_runtime_version", "CUDNN_VERSION": "cudnn_version", "NCCL_VERSION": "nccl_version"}
    out: dict[str, str] = {}
    for name, value in env:
        key = names.get(name.strip())
        value = value.strip().strip('"').strip()
        if key and value and key not in out:
            out[key] = value
    return out


def env_pairs(text: str, separator: str = ";") -> list[tuple[str, str]]:
    """NAME=value pairs of an environment written as one string (nsys' DeviceEnvironment)."""
    pairs = (item.partition("=") for item in text.split(separator))
    return [(name, value) for name, eq, value in pairs if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)]
