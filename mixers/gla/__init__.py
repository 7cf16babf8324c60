"""GLA and RetNet on fla's layers: ``layer.py`` and the routing of fla's ops (``routing.py``) to our chunked CPU
kernel, :mod:`mixers.common.ops.gla` (shared with protot); files by role: docs/ARCHITECTURE.md, "Mixer families"."""

from mixers.gla import layer  # noqa: F401 - registers the mixer(s)
