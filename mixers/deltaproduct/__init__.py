"""Gated DeltaProduct on fla's layer: ``layer.py``, the routing of fla's ops (``routing.py``) and the chunked CPU
kernel (``kernel.py``: the interleaved delta rule of :mod:`mixers.deltanet.kernel`); files by role:
docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.deltaproduct import layer  # noqa: F401 - registers the mixer
