"""Plugin registries for mixers and suites (DESIGN §2 and §5).

Three ways to get a class into a registry, all ending in the same ``register_*`` call:

* built-ins: the packages ``mixers`` and ``suites`` are imported on the first lookup;
* installed plugins: entry points in the groups ``mixbench.mixers`` / ``mixbench.suites`` (the entry point's
  value is a module or object whose import runs ``@register_mixer``); loaded on the first lookup;
* ``--plugin module.path`` on the CLI, which calls :func:`load_plugins`.

Unknown names raise :class:`UnknownNameError` listing what is registered and the closest match.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from harness.errors import ConfigError, MixbenchError, UnknownNameError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    cls: type[T]
    config_cls: type
    source: str

    def make_config(self, values: dict[str, Any] | None = None) -> Any:
        """Build the entry's config dataclass from a mapping of CLI strings or typed plan values, each converted
        and checked by its field's type and declared limits (:mod:`harness.values`); unknown keys are named."""
        from harness.values import build_config

        return build_config(self.config_cls, values, self.name)


@dataclass(frozen=True)
class EmptyConfig:
    """Config of a plugin that takes no options."""


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str, builtin_package: str):
        self.kind = kind
        self.group = group
        self.builtin_package = builtin_package
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False

    def register(self, name: str, config: type | None = None) -> Callable[[type[T]], type[T]]:
        config = config or EmptyConfig
        if not dataclasses.is_dataclass(config):
            raise TypeError(f"the config of {self.kind} '{name}' must be a dataclass, got {config!r}")

        def decorate(cls: type[T]) -> type[T]:
            existing = self._entries.get(name)
            if existing is not None and existing.cls.__qualname__ != cls.__qualname__:
                raise MixbenchError(
                    f"{self.kind} name '{name}' is already registered by {existing.source}; choose another name."
                )
            cls.name = name  # type: ignore[attr-defined]
            self._entries[name] = Entry(name, cls, config, f"{cls.__module__}.{cls.__qualname__}")
            return cls

        return decorate

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        importlib.import_module(self.builtin_package)
        for ep in importlib.metadata.entry_points(group=self.group):
            try:
                ep.load()
            except Exception as exc:  # a broken third-party plugin must not hide the others
                raise MixbenchError(
                    f"the {self.kind} plugin entry point '{ep.name} = {ep.value}' failed to import ({exc}); "
                    f"fix or uninstall that package."
                ) from exc

    def get(self, name: str) -> Entry[T]:
        self.ensure_loaded()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def names(self) -> list[str]:
        self.ensure_loaded()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        return [self._entries[n] for n in self.names()]


MIXERS: Registry = Registry("mixer", "mixbench.mixers", "mixers")
SUITES: Registry = Registry("suite", "mixbench.suites", "suites")


def register_mixer(name: str, config: type | None = None):
    """Class decorator: ``@register_mixer("protot", config=ProtoTConfig)``."""
    return MIXERS.register(name, config)


def register_suite(name: str, config: type | None = None):
    """Class decorator: ``@register_suite("perplexity", config=PerplexityConfig)``."""
    return SUITES.register(name, config)


def load_plugins(modules: Iterable[str]) -> None:
    """Import ``--plugin`` modules so that their ``register_*`` decorators run."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise MixbenchError(
                f"--plugin {module}: module not found ({exc.name}); make sure it is importable (on PYTHONPATH "
                f"or installed)."
            ) from exc
