"""transformers' own PyTorch code for an external model run on a CPU, in place of third-party kernels.

transformers binds some model functions (Mamba's selective scan, gated delta rules) to a third-party package's
kernel when that package imports, once, when the modeling module is imported; the kernels need CUDA or Triton.
On a CPU they fail, and whether they are bound depends on what the process imported first: mixbench's Mamba mixer
makes mamba-ssm importable without its CUDA extension (``mixers/mamba/routing.py``), and fla imports without
Triton. :func:`reference_functions` finds those bindings in the modules a model's layers come from, and
:func:`using` puts transformers' reference function (the one the binding wraps) in their place for the length of a
call, then puts the binding back, so a model on a GPU in the same process keeps its kernels (docs/huggingface.md).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from torch import nn

#: (module, global name, what it is bound to, transformers' reference function)
Swap = tuple[ModuleType, str, Any, Any]


def _is_hub_kernel_binding(value: Any) -> Any | None:
    """The reference function ``value`` wraps when it is a hub-kernel binding (a function from transformers'
    ``integrations/hub_kernels.py`` wrapping one defined elsewhere), else None."""
    from transformers.integrations import hub_kernels

    if not callable(value) or getattr(value, "__wrapped__", None) is None:
        return None
    chain, g = [], value
    while g is not None and len(chain) < 8:
        chain.append(g)
        g = getattr(g, "__wrapped__", None)
    from_hub = any(getattr(getattr(f, "__code__", None), "co_filename", None) == hub_kernels.__file__ for f in chain)
    reference = inspect.unwrap(value)
    return reference if from_hub and reference is not value else None


def reference_functions(model: nn.Module) -> list[Swap]:
    """The hub-kernel bindings in the modules that define ``model``'s layers, with their reference functions."""
    names = {type(m).__module__ for m in model.modules()}
    swaps = []
    for name in sorted(names):
        module = sys.modules.get(name)
        if module is None or not name.startswith("transformers."):
            continue
        for attr, value in vars(module).items():
            reference = _is_hub_kernel_binding(value)
            if reference is not None:
                swaps.append((module, attr, value, reference))
    return swaps


@contextlib.contextmanager
def using(swaps: list[Swap]) -> Iterator[None]:
    """Each binding replaced by its reference function while the block runs; restored after, even on error."""
    for module, attr, _, reference in swaps:
        setattr(module, attr, reference)
    try:
        yield
    finally:
        for module, attr, bound, _ in swaps:
            setattr(module, attr, bound)
