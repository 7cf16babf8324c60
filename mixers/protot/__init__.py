"""ProtoT, the prototype mixer: the layer, the prefix-mean definition and its chunked, C and GLA kernels."""

from mixers.protot import layer  # noqa: F401 - registers the mixer(s)
