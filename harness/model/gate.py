"""The conformance gate, enforced: no score is computed for a mixer that fails it (docs/ARCHITECTURE.md,
"The conformance gate").

``mixbench eval``, ``run``, ``nightly`` and the quickstart call :func:`require_gate` for every mixer and mixer
config at the backbone they score, before training or scoring anything and before the store is touched. The
verdict is cached under ``$MIXBENCH_CACHE/gate/`` by a key that hashes the mixer's identity (name, version,
source fingerprint, full config), the backbone, the gate's version and config, the device type and the package
versions, so an edited mixer is checked again and an unchanged one once. ``--skip-gate`` scores anyway, for
debugging, and the manifest records ``skipped``.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

from harness.config import ModelSpec, to_dict
from harness.model.conformance import GATE_VERSION, GateConfig, run_checks
from harness.errors import MixbenchError
from harness.store.manifest import GateRecord


class GateFailed(MixbenchError):
    """A mixer failed the conformance gate; the message says which checks and how to see why."""


def gate_key(spec: ModelSpec, device: str, config: GateConfig) -> str:
    from harness.store.identity import gate_identity

    return gate_identity(spec.mixer, spec.mixer_config, to_dict(spec.backbone), device, to_dict(config), GATE_VERSION)


def _cache_file(key: str) -> Path:
    from harness.store.storage import cache_dir

    return cache_dir() / "gate" / f"{key}.json"


def _describe(spec: ModelSpec) -> str:
    config = ", ".join(f"{k}={v}" for k, v in sorted(spec.mixer_config.items()))
    return f"'{spec.mixer}'" + (f" ({config})" if config else "")


def verdict_cached(spec: ModelSpec, device: str = "cpu", config: GateConfig | None = None) -> bool:
    """Whether the verdict for ``spec``'s mixer is in the cache: :func:`require_gate` would run no check."""
    return _read(gate_key(spec, device, config or GateConfig())) is not None


def require_gate(
    spec: ModelSpec, preset: str, device: str = "cpu", skip: bool = False, config: GateConfig | None = None,
    progress: bool = True,
) -> GateRecord:
    """The gate's verdict for ``spec``'s mixer at its backbone: from the cache, or by running the checks now.

    Raises :class:`GateFailed` (one sentence pointing at ``mixbench check``) when the mixer fails.
    """
    config = config or GateConfig()
    key = gate_key(spec, device, config)
    if skip:
        return GateRecord("skipped", GATE_VERSION, key)
    cached = _read(key)
    if cached is None:
        t0 = time.perf_counter()
        if progress:
            print(f"[mixbench] conformance gate for {_describe(spec)} at preset {preset} ...", file=sys.stderr,
                  flush=True)
        report = run_checks(spec.mixer, preset, spec.mixer_config, config, backbone=spec.backbone, device=device)
        cached = store_verdict(spec, device, config, report, time.perf_counter() - t0)
        if progress:
            verdict = "passed" if report.passed else f"FAILED ({', '.join(report.failures())})"
            print(f"[mixbench] conformance gate {verdict} in {cached['seconds']:.1f} s", file=sys.stderr, flush=True)
    if not cached["passed"]:
        hint = check_command(spec.mixer, preset, _assignments(spec.mixer_config), _backbone_args(spec, preset))
        raise GateFailed(
            f"mixer {_describe(spec)} fails the conformance gate ({', '.join(cached.get('where') or cached['failed'])})"
            f", so it is not scored; run `{hint}` to see why (--skip-gate scores it anyway, and says so in every "
            "result)."
        )
    return GateRecord("passed", GATE_VERSION, key, cached.get("seconds"))


def check_command(mixer: str, preset: str, config_args: str = "", backbone_args: str = "") -> str:
    """The ``mixbench check`` command that shows a verdict, with the ``--plugin`` modules this process loaded (a
    plugin's mixer is unknown without them) and the backbone where it is not the preset's (a hybrid's depth, a
    matched MLP width), shell-quoted (``hybrid:deltanet*3+attention`` holds a glob)."""
    from harness.registry import LOADED_PLUGINS

    plugins = "".join(f" --plugin {m}" for m in LOADED_PLUGINS)
    return (f"mixbench check {shlex.quote(mixer)} --preset {preset}{plugins}"
            + (f" --mixer-config {config_args}" if config_args else "")
            + (f" --backbone {backbone_args}" if backbone_args else ""))


def _assignments(values: dict) -> str:
    """``KEY=VALUE`` arguments that parse back to ``values`` (mappings and lists as JSON), each shell-quoted."""
    return " ".join(shlex.quote(f"{k}={v if isinstance(v, str) else json.dumps(v)}") for k, v in sorted(values.items()))


def _backbone_args(spec: ModelSpec, preset: str) -> str:
    """The backbone fields where ``spec``'s differ from the preset's (its vocabulary aside: the gate is blind to
    it), as ``--backbone`` arguments; none for a preset ``mixbench check`` does not know."""
    from harness.config import PRESETS
    from harness.store.manifest import diff_from

    if preset not in PRESETS:
        return ""
    p = PRESETS[preset]
    default = to_dict(type(spec.backbone)(**{**p.backbone, "vocab_size": spec.backbone.vocab_size}))
    return _assignments(diff_from(to_dict(spec.backbone), default))


def store_verdict(spec: ModelSpec, device: str, config: GateConfig, report, seconds: float) -> dict:
    """Cache ``report`` as the gate's verdict for ``spec`` (what ``mixbench check`` ran is then not run again by
    ``eval``/``run`` at the same backbone); returns the cached record."""
    record = {"passed": report.passed, "failed": report.failed, "where": report.failures(),
              "seconds": round(seconds, 2), "report": report.render()}
    _write(gate_key(spec, device, config), record)
    return record


def _read(key: str) -> dict | None:
    try:
        data = json.loads(_cache_file(key).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("passed"), bool) else None


def _write(key: str, data: dict) -> None:
    from harness.store.storage import atomic_write

    try:
        atomic_write(_cache_file(key), json.dumps(data, indent=1).encode())
    except OSError:  # an unwritable cache costs a rerun of the gate next time, never the verdict
        pass
