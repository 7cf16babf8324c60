"""ProtoT, the prototype mixer: the layer, the prefix-mean definition and its chunked, C and GLA kernels."""

from mixers.protot import layer  # noqa: F401 - registers the mixer(s)

# The citation is declared here, not in layer.py: a mixer's source fingerprint (harness/store/identity.py) covers
# layer.py and what it imports, so a citation there would make every stored protot model stale.
layer.ProtoT.paper = "Prototype Transformer (Yordanov et al., 2026), arXiv:2602.11852"
