"""Plugin registries for mixers and suites (docs/DESIGN.md §2 and §5).

Three ways to get a class into a registry, all ending in the same ``register_*`` call:

* built-ins: the packages ``mixers``, ``suites`` and ``reproductions`` are imported on the first lookup;
* installed plugins: entry points in the groups ``mixbench.mixers`` / ``mixbench.suites`` (the entry point's
  value is a module or object whose import runs ``@register_mixer``); loaded on the first lookup;
* ``--plugin module.path`` on the CLI, which calls :func:`load_plugins`;
* a name resolver (:meth:`Registry.add_resolver`) that builds ``<prefix>:<rest>`` names on first use.

Unknown names raise :class:`UnknownNameError` listing what is registered and the closest match. Registering a
name twice is an error naming both sources unless the second registration says ``override=True``; a broken
installed entry point is reported (a warning, and ``Registry.broken``) and skipped.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import pkgutil
import sys
import warnings
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
    def __init__(self, kind: str, group: str, builtin_package: str, base: str):
        self.kind = kind
        self.group = group
        self.builtin_package = builtin_package
        self.base = base  # "module:Class" every registered class must subclass (imported when first needed)
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False
        self.broken: dict[str, str] = {}  # entry points that failed to import: name -> reason
        self._resolvers: dict[str, Callable[[str], tuple[type[T], type]]] = {}
        self.patterns: dict[str, str] = {}  # name pattern -> what it builds (for the listings)

    def register(self, name: str, config: type | None = None, override: bool = False) -> Callable[[type[T]], type[T]]:
        config = config or EmptyConfig
        if not dataclasses.is_dataclass(config):
            raise TypeError(f"the config of {self.kind} '{name}' must be a dataclass, got {config!r}")

        def decorate(cls: type[T]) -> type[T]:
            module, _, attr = self.base.partition(":")
            base = getattr(importlib.import_module(module), attr)
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{self.kind} '{name}' must subclass {module}.{attr}, got {cls!r}")
            self.ensure_loaded()  # a plugin imported first must still meet the built-ins' names
            source = f"{cls.__module__}.{cls.__qualname__}"
            existing = self._entries.get(name)
            # The same class imported again (a module reloaded) replaces itself; anything else needs override=True,
            # so a plugin can never silently stand in for a built-in or for another plugin.
            if existing is not None and existing.source != source and not override:
                raise MixbenchError(
                    f"{self.kind} name '{name}' is registered by {existing.source} and again by {source}; choose "
                    f"another name, or register with override=True to replace it on purpose."
                )
            cls.name = name  # type: ignore[attr-defined]
            self._entries[name] = Entry(name, cls, config, source)
            return cls

        return decorate

    @property
    def loaded(self) -> bool:
        """Whether the built-ins and installed plugins have been imported in this process."""
        return self._loaded

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        import_package_modules(self.builtin_package)
        for ep in importlib.metadata.entry_points(group=self.group):
            try:
                ep.load()
            except Exception as exc:  # a broken third-party plugin must not hide the others: report and skip it
                self.broken[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
                warnings.warn(
                    f"the {self.kind} plugin entry point '{ep.name} = {ep.value}' failed to import ({exc}); it is "
                    "skipped. Fix or uninstall that package.",
                    stacklevel=2,
                )

    def add_resolver(self, prefix: str, resolve: Callable[[str], tuple[type[T], type]], pattern: str,
                     description: str) -> None:
        """Names ``<prefix>:<rest>`` are built on first use by ``resolve(rest) -> (class, config class)`` and then
        registered like any other (the generic fla adapter, ``fla:HGRN2Attention``); errors are ``resolve``'s.
        ``pattern`` and ``description`` are what the listings print."""
        self._resolvers[prefix] = resolve
        self.patterns[pattern] = description

    def get(self, name: str) -> Entry[T]:
        self.ensure_loaded()
        if name not in self._entries and ":" in name:
            prefix, rest = name.split(":", 1)
            if prefix in self._resolvers:
                cls, config = self._resolvers[prefix](rest)
                self.register(name, config)(cls)
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def names(self) -> list[str]:
        self.ensure_loaded()
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        return [self._entries[n] for n in self.names()]


def import_package_modules(package: str) -> None:
    """Import ``package`` and each of its public modules and sub-packages (names not starting with ``_``): the
    built-in mixer families, suites and targets are found the same way, so adding one is adding its folder or
    module and nothing else."""
    root = importlib.import_module(package)
    for module in pkgutil.iter_modules(root.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


MIXERS: Registry = Registry("mixer", "mixbench.mixers", "mixers", "harness.mixer:Mixer")
SUITES: Registry = Registry("suite", "mixbench.suites", "suites", "harness.suite:Suite")
#: known answers, checked by ``mixbench reproduce`` (harness/running/reproduce.py, docs/reproductions.md)
TARGETS: Registry = Registry("reproduction target", "mixbench.targets", "reproductions", "harness.reproduction:Target")


def control_mixers() -> list[str]:
    """Registered mixers whose class says ``control = True`` (docs/controls.md), sorted by name."""
    return [e.name for e in MIXERS.entries() if getattr(e.cls, "control", False)]


def resolve_controls(names: Iterable[str] | None, where: str = "controls") -> list[str]:
    """The controls a grid trains beside its mixers: every registered control when ``names`` is None, else the
    given names, each checked to be a registered control (``[]``: none)."""
    if names is None:
        return control_mixers()
    out = []
    for name in names:
        entry = MIXERS.get(name)
        if not getattr(entry.cls, "control", False):
            raise ConfigError(
                f"{where}: '{name}' is a mixer, not a control; controls are {', '.join(control_mixers()) or 'none'} "
                "(list mixers under mixers)."
            )
        if name not in out:
            out.append(name)
    return out


def register_mixer(name: str, config: type | None = None, override: bool = False):
    """Class decorator: ``@register_mixer("protot", config=ProtoTConfig)``; ``override=True`` replaces an existing
    registration of that name on purpose (otherwise a second registration is an error)."""
    return MIXERS.register(name, config, override)


def register_suite(name: str, config: type | None = None, override: bool = False):
    """Class decorator: ``@register_suite("perplexity", config=PerplexityConfig)``; see :func:`register_mixer`."""
    return SUITES.register(name, config, override)


def register_target(name: str, config: type | None = None, override: bool = False):
    """Class decorator for a :class:`harness.reproduction.Target`; see :func:`register_mixer`. The class must be
    a Target (every registry checks its base class) of a known kind (a typo in ``kind`` would list a claim among
    the harness's checks)."""
    inner = TARGETS.register(name, config, override)

    def wrap(cls):
        from harness.reproduction import KINDS, Target

        if isinstance(cls, type) and issubclass(cls, Target) and cls.kind not in KINDS:
            raise TypeError(f"target '{name}' has kind {cls.kind!r}; kinds: {', '.join(KINDS)}")
        return inner(cls)  # which refuses a class that is not a Target

    return wrap


#: ``--plugin`` modules imported by this process, in order (a command another process must repeat names them)
LOADED_PLUGINS: list[str] = []


def load_plugins(modules: Iterable[str]) -> None:
    """Import ``--plugin`` modules so that their ``register_*`` decorators run. A module in the working folder is
    found as ``python -m`` would find it (a new user's ``my_mixer.py`` beside them needed ``PYTHONPATH=.``, since
    the ``mixbench`` script does not put the working folder on the path); it is searched after the installed
    packages, so a folder named like one of them cannot shadow it. Workers started in the same folder (process
    pools, Ray, torchrun) repeat this."""
    modules = list(modules)
    cwd = os.getcwd()
    if modules and cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    for module in modules:
        if module not in LOADED_PLUGINS:
            LOADED_PLUGINS.append(module)
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise MixbenchError(
                f"--plugin {module}: module not found ({exc.name}); make sure it is importable (on PYTHONPATH "
                f"or installed)."
            ) from exc
        except SyntaxError as exc:
            raise MixbenchError(
                f"--plugin {module}: {exc.filename}, line {exc.lineno}: {exc.msg}; fix the plugin's source."
            ) from exc
        except MixbenchError:
            raise  # a registration mistake (a name taken twice) already says what to do
        except Exception as exc:  # noqa: BLE001 - whatever the plugin's own code raises while it is imported
            where = _innermost_frame(exc)
            raise MixbenchError(
                f"--plugin {module} failed while being imported ({type(exc).__name__}: {exc}{where}); fix the plugin."
            ) from exc


def _innermost_frame(exc: BaseException) -> str:
    """`` at FILE, line N``: where the exception was raised, for a plugin that fails on import."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename}, line {frames[-1].lineno}" if frames else ""
