"""Per-call kernel routing for mixers built from third-party packages (mamba-ssm, flash-linear-attention).

Those packages call their CUDA/Triton kernels through module-level names (``mamba_simple.selective_scan_fn``,
``fla.layers.delta_net.chunk_delta_rule``...). Each family's ``routing`` module (``mixers.mamba.routing``,
``mixers.deltanet.routing`` ...) replaces each such name, once, by a :func:`route` dispatcher that calls either
the package's own kernel or a pure-torch path. Which one is decided per call:

* inside ``with selected(kernel):`` (what a mixer wraps around every call into its package layer), by the kernel
  that mixer instance has selected: that is how ``set_kernel`` really switches the code one instance runs;
* outside any selection (someone using the package directly), by the device: CUDA tensors get the package kernel.

The selection is a context variable, so concurrent threads each see their own.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

_SELECTED: ContextVar[str | None] = ContextVar("mixbench_selected_kernel", default=None)


@contextlib.contextmanager
def selected(kernel: str) -> Iterator[None]:
    """Route the package calls made inside this block to ``kernel``."""
    token = _SELECTED.set(kernel)
    try:
        yield
    finally:
        _SELECTED.reset(token)


def current() -> str | None:
    """The kernel selected by the innermost :func:`selected` block, or None outside one."""
    return _SELECTED.get()


def route(
    package_fn: Callable[..., Any] | None,
    torch_fn: Callable[..., Any],
    *,
    probe: str,
    package_kernels: frozenset[str],
) -> Callable[..., Any]:
    """A dispatcher with ``package_fn``'s signature.

    ``probe`` names the tensor argument whose device decides when no kernel is selected (looked up by keyword,
    else the first positional argument). ``package_fn=None`` means the package kernel is absent here (a CPU-only
    wheel): every call then takes ``torch_fn``.
    """

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        kernel = _SELECTED.get()
        if kernel is None:
            probe_tensor = kwargs[probe] if probe in kwargs else args[0]
            use_package = probe_tensor.is_cuda
        else:
            use_package = kernel in package_kernels
        fn = package_fn if use_package and package_fn is not None else torch_fn
        return fn(*args, **kwargs)

    if package_fn is not None:
        functools.update_wrapper(dispatch, package_fn)
    return dispatch
