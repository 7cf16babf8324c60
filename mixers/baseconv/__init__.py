"""BaseConv, zoology's gated convolution: ``layer.py``; kernels `direct` (``reference.py``) and `fft` (``kernel.py``,
every default); files by role: docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.baseconv import layer  # noqa: F401 - registers the mixer(s)

# The citation is declared here, not in layer.py: a mixer's source fingerprint covers layer.py and what it imports
# (harness/store/identity.py), so a citation there would make every stored model of it stale.
layer.BaseConv.paper = ("Zoology: Measuring and Improving Recall in Efficient Language Models (Arora, Eyuboglu et al., "
                        "ICLR 2024), BaseConv")
