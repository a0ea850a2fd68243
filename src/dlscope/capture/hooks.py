"""Hooks into an unmodified PyTorch program: where a step ends, how big a batch is, which module runs.

Each installer returns a function that removes what it installed, so a capture leaves the process
as it found it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

MODULE_PREFIX = "nn.Module: "


def on_optimizer_step(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` after every ``step()`` of the first optimizer that steps.

    Uses torch's global optimizer post-hook, which covers every subclass (SGD, Adam, ...) whose own
    ``step`` overrides the base method. Following only the first optimizer keeps one iteration per
    training step when a loop steps several (a GAN's generator and discriminator).
    """
    from torch.optim.optimizer import register_optimizer_step_post_hook

    leader: list[weakref.ref] = []

    def hook(optimizer, args, kwargs) -> None:
        if not leader:
            leader.append(weakref.ref(optimizer))
        if leader[0]() is optimizer:
            callback()

    return register_optimizer_step_post_hook(hook).remove


def first_batch_size(batch: Any) -> int | None:
    """First dimension of the first tensor in a batch (tensor, tuple/list, dict), or None."""
    import torch

    stack = [batch]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.dim() >= 1 else None
        if isinstance(item, dict):
            stack[:0] = list(item.values())
        elif isinstance(item, (list, tuple)):
            stack[:0] = list(item)
    return None


def on_first_batch(callback: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``callback(batch)`` with the first batch any DataLoader yields, then unhook (no cost after)."""
    from torch.utils.data import dataloader

    cls = dataloader._BaseDataLoaderIter
    original = cls.__next__
    done = threading.Event()

    def restore() -> None:
        if cls.__dict__.get("__next__") is patched:
            cls.__next__ = original  # type: ignore[method-assign]  # undoing the patch below

    def patched(self):
        batch = original(self)
        if not done.is_set():
            done.set()
            restore()
            callback(batch)
        return batch

    cls.__next__ = patched  # type: ignore[method-assign]  # DataLoader iterators have no hook: patch the class
    return restore


def annotate_modules(active: Callable[[], bool]) -> Callable[[], None]:
    """Wrap each ``nn.Module`` forward in a ``record_function("nn.Module: Root.path.to.child")`` range.

    ``with_modules`` only works for TorchScript; eager models get their hierarchy from these nested
    ranges. ``active()`` is asked at each forward so the hooks cost almost nothing outside the window.
    """
    import torch
    from torch.nn.modules import module as nn_module

    names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    local = threading.local()
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction

    def name_of(mod) -> str:
        name = names.get(mod)
        if name is None:
            root = type(mod).__name__
            for sub_name, sub in mod.named_modules(remove_duplicate=False):
                names.setdefault(sub, f"{root}.{sub_name}" if sub_name else root)
            name = names[mod]
        return name

    def pre(mod, args) -> None:
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        if active():
            stack.append((mod, enter(MODULE_PREFIX + name_of(mod), None)))
        else:
            stack.append((mod, None))

    def post(mod, args, output) -> None:
        stack = getattr(local, "stack", None)
        while stack:  # unwind ranges of children that raised without reaching their post hook
            entered, handle = stack.pop()
            if handle is not None:
                leave(handle)
            if entered is mod:
                break

    h_pre = nn_module.register_module_forward_pre_hook(pre)
    h_post = nn_module.register_module_forward_hook(post, always_call=True)

    def remove() -> None:
        h_pre.remove()
        h_post.remove()

    return remove
