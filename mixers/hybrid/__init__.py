"""``hybrid:<pattern>``: stacks of other registered mixers, repeated over the depth (:mod:`mixers.hybrid.layer`)."""

from harness.registry import MIXERS
from mixers.hybrid import layer

MIXERS.add_resolver(
    layer.PREFIX, layer.resolve, "hybrid:<part>*N+<part>...",
    "layers of other registered mixers, the period repeated over the depth (e.g. hybrid:gated-deltanet*3+attention; "
    "docs/hybrids.md); per-part configs: --mixer-config 'parts={\"deltanet\": {\"num_heads\": 2}}'",
)
