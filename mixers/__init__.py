"""Built-in mixer plugins, one folder per family (docs/ARCHITECTURE.md, "Mixers"). Importing this package
registers them (the registry does so on first lookup), and the ``fla:<LayerClass>`` and ``hybrid:<pattern>``
name resolvers."""

from mixers import (  # noqa: F401
    attention, baseconv, controls, deltanet, deltaproduct, fla_any, gla, hybrid, mamba, protot, rwkv7,
)
