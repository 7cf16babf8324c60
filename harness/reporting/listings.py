"""What the CLI can say without running anything, cached: the suites' own subcommands (for ``--help`` and the
parser) and the text of ``mixbench mixers`` / ``mixbench suites``.

Producing them imports every mixer and suite, and with them torch (4-5 s on the project's CPU); a new user meets
that on ``--help`` and on every typo. So each is computed once and kept in ``$MIXBENCH_CACHE/listings/`` under a
fingerprint of everything that defines it: the stat (path, mtime, size) of every module of the ``harness``,
``mixers`` and ``suites`` packages, the installed ``mixbench.*`` entry points, the files of the ``--plugin``
modules, found without importing them, and the name and version of every installed distribution (a listing names
package versions, and which kernels a mixer has depends on them). Any edit or install changes the fingerprint and
recomputes; warnings the computation printed (a broken plugin) are stored with it and printed again on every use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from harness.store.storage import atomic_write, cache_dir

_PACKAGES = ("harness", "mixers", "suites")
_GROUPS = ("mixbench.mixers", "mixbench.suites")
#: the registries were loaded by a computation of this module (so they hold what the files say, and later
#: listings may still be cached), not by a caller that may have registered more
_LOADED_HERE = False


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}|missing"
    return f"{path}|{st.st_mtime_ns}|{st.st_size}"


def _module_files(name: str) -> list[Path]:
    """The source files of module or package ``name``, located without importing it (a dotted name imports its
    parents, which is what importing it would do anyway)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [p for loc in spec.submodule_search_locations for p in sorted(Path(loc).rglob("*.py"))]
    return [Path(spec.origin)] if spec.origin and spec.origin not in ("built-in", "frozen") else []


def _installed() -> list[str]:
    """The ``.dist-info`` / ``.egg-info`` folder names on ``sys.path`` (each holds a distribution's name and
    version): read from the folder listings, not the metadata, which would cost the start-up a tenth of a second."""
    found = []
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as items:
                found += [item.name for item in items if item.name.endswith((".dist-info", ".egg-info"))]
        except OSError:  # a zip file, a path hook, a folder that is gone
            continue
    return sorted(found)


def code_fingerprint(plugins: Iterable[str] = ()) -> str:
    """A hash of what the listings depend on (see the module docstring)."""
    parts = [sys.version, *_installed()]
    for package in _PACKAGES:
        parts += [_stat(p) for p in _module_files(package)]
    for group in _GROUPS:
        for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
            parts.append(f"{group}|{ep.name}|{ep.value}")
            parts += [_stat(p) for p in _module_files(ep.value.split(":")[0])]
    for module in plugins:
        parts.append(f"plugin|{module}")
        parts += [_stat(p) for p in _module_files(module)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def cached(kind: str, plugins: Iterable[str], compute: Callable[[], Any]) -> Any:
    """``compute()`` (JSON-able), from the cache when the code has not changed since it was stored; the warnings
    it raised are replayed either way. Older entries of ``kind`` are removed when a new one is stored.

    Once this process has loaded a registry (a plugin registered something, or a caller did), what is registered
    may differ from what the files say, and the imports are paid anyway: then it is computed, not cached."""
    global _LOADED_HERE
    from harness.registry import MIXERS, SUITES

    loaded_before = MIXERS.loaded or SUITES.loaded
    if loaded_before and not _LOADED_HERE:
        return compute()
    plugins = list(plugins)
    folder = cache_dir() / "listings"
    path = folder / f"{kind}-{code_fingerprint(plugins)}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = compute()
        _LOADED_HERE = _LOADED_HERE or (not loaded_before and (MIXERS.loaded or SUITES.loaded))
        entry = {"value": value, "warnings": [str(w.message) for w in caught]}
        try:
            for old in folder.glob(f"{kind}-*.json"):
                old.unlink(missing_ok=True)
            atomic_write(path, json.dumps(entry).encode("utf-8"))
        except OSError:  # a read-only cache: the listing is still right, only slower next time
            pass
    for message in entry.get("warnings", []):
        warnings.warn(message, stacklevel=2)
    return entry["value"]


def printed(fn: Callable[[], Any]) -> Callable[[], str]:
    """``fn`` as a computation of what it prints."""

    def compute() -> str:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            fn()
        return buffer.getvalue()

    return compute


# ---------------------------------------------------------------------------------------------- the listings


def list_mixers(config: str | None) -> None:
    """``mixbench mixers``: every mixer, its kernels, capabilities and config; with ``config``, that mixer's
    config fields."""
    from harness.registry import MIXERS
    from harness.values import describe_fields

    if config is not None:
        entry = MIXERS.get(config)
        print(f"{entry.name} config (--mixer-config KEY=VALUE, or mixers: {{{entry.name}: {{...}}}} in a plan):")
        print("\n".join(describe_fields(entry.config_cls)))
        return
    entries = MIXERS.entries()
    for entry in [e for e in entries if not e.cls.control]:
        describe_mixer(entry)
    for pattern, description in MIXERS.patterns.items():
        print(f"{pattern}\n  {description}")
    controls = [e for e in entries if e.cls.control]
    if controls:
        print("\ncontrols (trained and scored beside the mixers of every grid, never ranked; docs/controls.md):")
    for entry in controls:
        describe_mixer(entry)


def describe_mixer(entry) -> None:
    import dataclasses

    from harness.store.provenance import package_versions

    fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(entry.config_cls))
    kind = " (control: context-free)" if entry.cls.context_free else (" (control)" if entry.cls.control else "")
    print(f"{entry.name}{kind}")
    if entry.cls.control and entry.cls.__doc__:
        print(f"  what it is:   {' '.join(entry.cls.__doc__.split())}")
    print(f"  kernels:      {', '.join(entry.cls.kernels)} (reference: {entry.cls.kernels[0]})")
    print(f"  capabilities: {', '.join(entry.cls.capabilities())}")
    print(f"  config:       {fields or '(none)'}")
    if getattr(entry.cls, "paper", ""):
        print(f"  paper:        {entry.cls.paper}")
    versions = package_versions(tuple(getattr(entry.cls, "packages", ())))
    if versions:
        print(f"  packages:     {', '.join(f'{name} {version}' for name, version in versions.items())}")
    print(f"  source:       {entry.source}")


def list_suites(names: list[str]) -> None:
    """``mixbench suites``: each suite (all, or ``names``), its scope and its config fields."""
    from harness.registry import SUITES
    from harness.values import describe_fields

    for i, name in enumerate(names or SUITES.names()):
        entry = SUITES.get(name)
        doc = (entry.cls.__doc__ or sys.modules[entry.cls.__module__].__doc__ or "").strip().split("\n\n")[0]
        print(("\n" if i else "") + f"{entry.name}  ({entry.source}; scope {entry.cls.scope})")
        if doc:
            print(f"  {' '.join(doc.split())}")
        print("\n".join(describe_fields(entry.config_cls)))
    print("\nset fields with --suite-config KEY=VALUE (lists: a,b,c) or suites: {NAME: {KEY: VALUE}} in a plan.")
