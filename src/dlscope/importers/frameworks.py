"""Which JSON trace a file is (Kineto, TensorFlow/JAX, PaddlePaddle) and the loader of each non-Kineto format.

Kept apart from the format sniffing in ``importers/__init__.py`` so that the change there is two calls.
"""

from __future__ import annotations

from pathlib import Path

from ..model import Profile


def json_flavour(head: bytes) -> str:
    """"tf_trace", "paddle" or "kineto" for the first KBs of a JSON trace."""
    from .paddle import looks_like_paddle
    from .tf_trace import looks_like_tf_trace

    if looks_like_tf_trace(head):
        return "tf_trace"
    if looks_like_paddle(head):
        return "paddle"
    return "kineto"


def load_framework(path: Path, kind: str) -> Profile:
    """Import a TensorFlow/JAX (``xspace``, ``tf_trace``) or PaddlePaddle (``paddle``) file."""
    if kind == "xspace":
        from .xspace import load_xspace

        return load_xspace(path)
    if kind == "tf_trace":
        from .tf_trace import load_tf_trace

        return load_tf_trace(path)
    from .paddle import load_paddle

    return load_paddle(path)
