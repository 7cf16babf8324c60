"""Gated DeltaProduct on fla's layer: the layer, its CPU routing, and the chunked CPU kernel (the interleaved delta
rule of :mod:`mixers.deltanet.kernel`)."""

from mixers.deltaproduct import layer  # noqa: F401 - registers the mixer
