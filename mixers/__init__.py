"""Built-in mixer plugins, one folder per family (docs/ARCHITECTURE.md, "Mixers"). Importing this package
registers them (the registry does so on first lookup)."""

from mixers import attention, controls, deltanet, mamba, protot  # noqa: F401
