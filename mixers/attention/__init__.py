"""Softmax attention (LLaMA-3.1 style): the layer; kernels `naive` (the reference) and `sdpa`."""

from mixers.attention import layer  # noqa: F401 - registers the mixer(s)

# The citation is declared here, not in layer.py: a mixer's source fingerprint (harness/store/identity.py) covers
# layer.py and what it imports, so a citation there would make every stored attention model stale.
layer.Attention.paper = "Attention Is All You Need (Vaswani et al., NeurIPS 2017)"
