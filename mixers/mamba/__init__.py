"""Mamba-1 and Mamba-2 on mamba-ssm's modules: the layer, its CPU routing, and our CPU scans."""

from mixers.mamba import layer  # noqa: F401 - registers the mixer(s)
