"""``fla:<LayerClass>``: any flash-linear-attention layer as a mixer (:mod:`mixers.fla_any.adapter`)."""

from harness.registry import MIXERS
from mixers.fla_any import adapter

MIXERS.add_resolver(
    adapter.PREFIX, adapter.resolve, "fla:<LayerClass>",
    "any fla.layers layer (e.g. fla:HGRN2Attention), fla's Triton kernels on CUDA; on CPU only the layers a built-in "
    "mixer routes (docs/fla_mixers.md); options: --mixer-config 'options={\"num_heads\": 4}'",
)
