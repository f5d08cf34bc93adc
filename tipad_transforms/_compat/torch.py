"""torch's private APIs, each behind a function with a safe default (see ``_compat``): one
that sends the caller down its general path (through the dispatcher, through
``nn.Module.__call__``, rebuilding a cached copy)."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import torch
from torch.nn.modules import module as _module

__all__ = [
    "MISSING",
    "cuda_device_count",
    "functorch_active",
    "global_module_hooks",
    "in_bad_fork",
    "jit_tracing",
    "mode_depth",
    "module_hooks",
    "nvml_device_count",
    "tensor_version",
]

#: The private names this torch lacks (``tests/test_compat.py`` requires it to be empty).
MISSING: list[str] = []


def _get(owner: Any, name: str, where: str) -> Any:
    value = getattr(owner, name, None)
    if value is None:
        MISSING.append(f"{where}.{name}")
    return value


_tracing_state = _get(torch._C, "_get_tracing_state", "torch._C")
_functorch = _get(torch._C, "_are_functorch_transforms_active", "torch._C")
_dispatch_len = _get(torch._C, "_len_torch_dispatch_stack", "torch._C")
_function_len = _get(torch._C, "_len_torch_function_stack", "torch._C")
_device_count = _get(torch._C, "_cuda_getDeviceCount", "torch._C")
_bad_fork = _get(torch.cuda, "_is_in_bad_fork", "torch.cuda")
_nvml_count = _get(torch.cuda, "_raw_device_count_nvml", "torch.cuda")
_GLOBAL_HOOKS = tuple(
    _get(_module, name, "torch.nn.modules.module")
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
)
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
if not hasattr(torch.empty(0), "_version"):
    MISSING.append("torch.Tensor._version")


def jit_tracing() -> bool:
    """Whether ``torch.jit.trace`` is tracing on this thread (default: True)."""
    return True if _tracing_state is None else _tracing_state() is not None


def functorch_active() -> bool:
    """Whether a functorch transform (vmap, grad, jvp, functionalize) is active (default: True)."""
    return True if _functorch is None else bool(_functorch())


def mode_depth() -> int:
    """How many torch dispatch and torch function modes are active on this thread: fake,
    proxy and functional modes, pre-dispatch tracing, ``torch.device`` contexts, users' modes
    (default: 1)."""
    if _dispatch_len is None or _function_len is None:
        return 1
    return int(_dispatch_len()) + int(_function_len())


def cuda_device_count() -> int:
    """The devices the CUDA runtime of this process sees (starting it), not cached as
    ``torch.cuda.device_count`` is, so it follows a changed ``CUDA_VISIBLE_DEVICES``. 0 without
    CUDA (default: ``torch.cuda.device_count()``)."""
    if not torch.backends.cuda.is_built():
        return 0
    if _device_count is None:
        return torch.cuda.device_count()
    return int(_device_count())


def nvml_device_count() -> int:
    """GPUs on the machine as NVML counts them (never starts CUDA), or -1 where NVML cannot
    tell (default: -1)."""
    if _nvml_count is None:
        return -1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return int(_nvml_count())
    except (OSError, AttributeError, RuntimeError):
        return -1


def in_bad_fork() -> bool:
    """Whether this process was forked after CUDA started in its parent (CUDA cannot start
    here; default: False, and CUDA then fails with torch's own error)."""
    return False if _bad_fork is None else bool(_bad_fork())


def global_module_hooks() -> bool:
    """Whether any global ``nn.Module`` forward or backward hook is registered (default: True)."""
    return any(h is None or h for h in _GLOBAL_HOOKS)


def module_hooks(m: torch.nn.Module) -> bool:
    """Whether ``m`` has forward or backward hooks of its own (default: True)."""
    d = m.__dict__
    return any(d.get(name, True) for name in _MODULE_HOOKS)


def tensor_version(t: torch.Tensor) -> int:
    """``t``'s in-place version counter (autograd's: every in-place op bumps it, writes through
    ``.data`` escape it), default: a new number on every call, so a cache keyed by it is never
    reused."""
    version = getattr(t, "_version", None)
    return next(_fallback_versions) if version is None else int(version)


_fallback_versions = itertools.count(-1, -1)
