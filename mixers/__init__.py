"""Built-in mixer plugins. Importing this package registers them (the registry does so on first lookup)."""

from mixers import attention, protot  # noqa: F401
from mixers import deltanet, mamba  # noqa: F401
from mixers import controls  # noqa: F401
