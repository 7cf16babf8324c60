"""ProtoT, the prototype mixer: ``layer.py`` (with the kernel registry), the prefix-mean definition
(``reference.py``), the chunked CPU kernel (``kernel.py``, its recurrences in C: ``kernel_c.py``) and the route to
fla's GLA kernel (``routing.py``); files by role: docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.protot import layer  # noqa: F401 - registers the mixer(s)

# The citation is declared here, not in layer.py: a mixer's source fingerprint (harness/store/identity.py) covers
# layer.py and what it imports, so a citation there would make every stored protot model stale.
layer.ProtoT.paper = "Prototype Transformer (Yordanov et al., 2026), arXiv:2602.11852"
