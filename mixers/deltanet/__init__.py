"""DeltaNet and Gated DeltaNet on fla's layers: the layer, its CPU routing, and our chunked CPU kernels."""

from mixers.deltanet import layer  # noqa: F401 - registers the mixer(s)
