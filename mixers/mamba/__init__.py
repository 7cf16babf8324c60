"""Mamba-1 and Mamba-2 on mamba-ssm's modules: ``layer.py``, the routing of the package's kernels (``routing.py``),
our CPU scans (``kernel.py``, the Mamba-1 scan in C: ``kernel_c.py``), the Mamba-1 layer's CPU forward (``fused.py``)
and our definition for ``allow_neg_eigval`` (``reference.py``); files by role: docs/ARCHITECTURE.md, "Mixer
families"."""

from mixers.mamba import layer  # noqa: F401 - registers the mixer(s)

# The citation is declared here, not in layer.py: a mixer's source fingerprint (harness/store/identity.py) covers
# layer.py and what it imports, so a citation there would make every stored mamba and mamba2 model stale.
layer.MambaMixer.paper = "Mamba: Linear-Time Sequence Modeling with Selective State Spaces (Gu and Dao, 2023)"
layer.Mamba2Mixer.paper = ("Transformers are SSMs: Generalized Models and Efficient Algorithms Through "
                           "Structured State Space Duality (Dao and Gu, ICML 2024)")
