"""RWKV-7 on fla's ``RWKV7Attention``: the layer, its CPU routing, and mixbench's chunked CPU kernel."""

from mixers.rwkv7 import layer  # noqa: F401 - registers the mixer
