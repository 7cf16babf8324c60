"""RWKV-7 on fla's ``RWKV7Attention``: ``layer.py``, the routing of fla's ops (``routing.py``) and mixbench's chunked
CPU kernel (``kernel.py``); files by role: docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.rwkv7 import layer  # noqa: F401 - registers the mixer
