"""DeltaNet and Gated DeltaNet on fla's layers: ``layer.py``, the routing of fla's ops (``routing.py``), our chunked
CPU kernel (``kernel.py``, its inverse in C: ``kernel_c.py``) and the layer's CPU forward (``fused.py``); files by
role: docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.deltanet import layer  # noqa: F401 - registers the mixer(s)
