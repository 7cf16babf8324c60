"""Softmax attention (LLaMA-3.1 style): the layer; kernels `naive` (the reference) and `sdpa`."""

from mixers.attention import layer  # noqa: F401 - registers the mixer(s)
