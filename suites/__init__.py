"""Built-in suites: every public module in this package registers one (the registry imports them on first
lookup), so adding a suite means adding a module here and nothing else."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
