"""The one identity function: what makes two models, or two runs, the same (docs/ARCHITECTURE.md, "Identity").

A **model's identity** hashes everything that determines its weights: the mixer's name and declared
``version``, a fingerprint of the mixer's source, the full typed mixer config (defaults filled in), the
backbone, training and data configs, the data and tokenizer fingerprint, the seed, a fingerprint of the core
code that builds and trains models, and the versions of the packages that compute it (torch, mamba-ssm,
flash-linear-attention). A **run's identity** adds the suite's name, ``version``, source fingerprint and full
config and, for device-dependent suites, the device descriptor (device, threads, threading policy). A
mixer-scoped suite (one that trains its own small models from the mixer's definition) keys its runs by the
**mixer identity** (name, version, source, full config) instead of a model's.

Every kind of run (suite runs, lm-eval, judge ratings), the runner's skip logic and the checkpoint folder
names call :func:`model_identity` / :func:`run_identity` here and nowhere else: changing a mixer's or a
suite's code re-runs exactly the runs that depend on it.

**Source fingerprints.** A plugin's fingerprint is the SHA-256 of the source of its module and of every module
it imports, transitively, from its own top-level package (``mixers.protot.layer`` brings ``mixers.protot.reference``),
plus the core modules in :data:`NUMERIC_CORE` it reaches: the ones whose code computes numbers. Other core
modules (the store, the board, the CLI) can change without recomputing anything.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import RunSpec, content_hash, to_dict

#: bump when the meaning of an identity changes (a new part, another hash): every stored id changes with it
IDENTITY_VERSION = 2
#: packages whose code computes model outputs: their versions are part of a model's identity
IDENTITY_PACKAGES = ("torch", "mamba-ssm", "flash-linear-attention", "fla-core")
#: core modules whose code changes numbers (models, training, statistics, timing, judge calls); a plugin's
#: fingerprint includes those of them it imports, and every model's identity includes the model-building ones
NUMERIC_CORE = (
    "harness.model.backbone", "harness.mixer", "harness.running.training", "harness.model.batching", "harness.recording",
    "harness.stats", "harness.timing", "harness.llm_judge",
)  # fmt: skip
#: what every trained model depends on whatever its mixer imports
MODEL_CORE = ("harness.model.backbone", "harness.mixer", "harness.running.training", "harness.model.batching")


@dataclass(frozen=True)
class Identity:
    """A content hash and the parts it hashes (stored in manifests so a reader can see what differs)."""

    id: str
    parts: dict[str, Any]


def _identity(parts: dict[str, Any]) -> Identity:
    parts = {"identity_version": IDENTITY_VERSION, **parts}
    return Identity(content_hash(parts), parts)


# ---------------------------------------------------------------------------------------------- source


def _numeric_core(module: str) -> bool:
    return any(module == core or module.startswith(core + ".") for core in NUMERIC_CORE)


def _module_file(name: str) -> Path | None:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if file is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
        file = getattr(spec, "origin", None) if spec is not None else None
    if not file or not str(file).endswith(".py"):
        return None
    return Path(file)


def _imports(name: str, path: Path, followed: Callable[[str], bool]) -> set[str]:
    """Absolute names of the modules ``name`` imports (relative imports resolved), read from its source.

    ``from pkg import a`` counts as importing the submodule ``pkg.a`` when there is one (not ``pkg``, whose
    ``__init__`` may import every sibling), and as importing ``pkg`` when ``a`` is a name defined there. Telling
    the two apart means finding ``pkg.a``, which imports ``pkg``: that is done only where ``followed`` says the
    answer matters, never for outside packages (importing flash-linear-attention alone takes seconds).
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                resolve = followed(sub) or followed(base)
                found.add(sub if resolve and _module_file(sub) is not None else base)
    return found


@functools.lru_cache(maxsize=None)
def source_fingerprint(module: str) -> str:
    """SHA-256 (16 hex) of ``module``'s source and of the modules it reaches (see the module docstring)."""
    top = module.split(".")[0]

    def followed(imported: str) -> bool:
        return imported.split(".")[0] == top or _numeric_core(imported)

    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(imported for imported in _imports(name, path, followed) if followed(imported))
    h = hashlib.sha256()
    for name in sorted(seen):
        h.update(name.encode() + b"\0" + seen[name].read_bytes() + b"\0")
    return h.hexdigest()[:16]


def class_module(cls: type) -> str:
    """The module that defines ``cls`` (``__main__`` classes are fingerprinted by their file)."""
    module = cls.__module__
    if module == "__main__":  # a mixer defined in a script: fingerprint the script itself
        file = inspect.getsourcefile(cls)
        return f"__main__:{file}"
    return module


def plugin_fingerprint(cls: type) -> str:
    module = class_module(cls)
    if module.startswith("__main__:"):
        path = Path(module.split(":", 1)[1])
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "unknown"
    return source_fingerprint(module)


@functools.lru_cache(maxsize=None)
def core_fingerprint(modules: tuple[str, ...] = MODEL_CORE) -> str:
    return content_hash({m: source_fingerprint(m) for m in modules})


def identity_packages() -> dict[str, str]:
    from harness.store.provenance import package_versions

    return package_versions(IDENTITY_PACKAGES)


# ---------------------------------------------------------------------------------------------- identities


def mixer_identity(mixer: str, mixer_config: dict[str, Any] | None) -> Identity:
    """Name, declared version, source fingerprint and the full config (defaults filled in) of a mixer; for a mixer
    whose class builds its layers from other registered mixers (``components(config)``: a hybrid's parts,
    docs/hybrids.md) also each part's identity, so editing a part's code changes every hybrid holding it."""
    from harness.registry import MIXERS

    entry = MIXERS.get(mixer)
    config = entry.make_config(mixer_config)
    parts = {
        "mixer": mixer,
        "mixer_version": int(getattr(entry.cls, "version", 1)),
        "mixer_source": entry.source,
        "mixer_code": plugin_fingerprint(entry.cls),
        "mixer_config": to_dict(config),
    }
    components = getattr(entry.cls, "components", None)  # a mixer built of other mixers (docs/hybrids.md)
    if components is not None:
        parts["mixer_parts"] = [mixer_identity(name, values).parts for name, values in components(config)]
    return _identity(parts)


def model_identity(spec: Any, data_fingerprint: str) -> Identity:
    """The identity of the model a :class:`harness.config.RunSpec` trains on data with ``data_fingerprint``."""
    mixer = mixer_identity(spec.model.mixer, spec.model.mixer_config)
    return _identity(
        {
            "mixer": mixer.parts,
            "backbone": to_dict(spec.model.backbone),
            "train": to_dict(spec.train),  # includes the seed
            "data": to_dict(spec.data),
            "data_fingerprint": data_fingerprint,
            "preset": spec.preset,
            "extra": to_dict(spec.extra),
            "core_code": core_fingerprint(),
            "packages": identity_packages(),
        }
    )


def external_identity(descriptor: dict[str, Any], data_fingerprint: str) -> Identity:
    """A ``transformers`` model mixbench did not train, scored on data with ``data_fingerprint`` under its own
    tokenizer (docs/huggingface.md): its name, revision (hub commit or a hash of its files), class, parameter count
    and dtype, the data, and the versions of transformers and torch, which compute its numbers."""
    return _identity({"external": dict(descriptor), "data_fingerprint": data_fingerprint,
                      "core_code": core_fingerprint(("harness.hf.external",)), "packages": identity_packages()})


def trained_identity(model: Identity, weights_sha256: str | None) -> Identity:
    """What a run scored: the model identity and the hash of the weights training produced. Two trainings of one
    identity agree on CPU but need not on a GPU (non-deterministic kernels), and a checkpoint can be edited; a
    run on other weights is another run."""
    return Identity(content_hash({"model": model.id, "weights_sha256": weights_sha256}),
                    {**model.parts, "weights_sha256": weights_sha256})


def row_identity(model: Identity) -> str:
    """The model identity without its training seed: models that differ only by seed share one board row and
    are averaged; anything else that differs makes another row."""
    parts = {k: v for k, v in model.parts.items() if k != "weights_sha256"}
    train = dict(parts.get("train") or {})
    train.pop("seed", None)
    parts["train"] = train
    return content_hash(parts)


#: subject identity parts that change when code or packages change, not the configuration
CODE_PARTS = ("mixer_code", "core_code", "packages", "identity_version", "mixer_version")


def _mixer_without_code(mixer: dict[str, Any]) -> dict[str, Any]:
    """A mixer identity's parts without code fingerprints, its parts' (a hybrid's, docs/hybrids.md) included."""
    out = {k: v for k, v in mixer.items() if k not in CODE_PARTS}
    if isinstance(out.get("mixer_parts"), list):
        out["mixer_parts"] = [_mixer_without_code(p) if isinstance(p, dict) else p for p in out["mixer_parts"]]
    return out


def lineage_identity(subject_parts: dict[str, Any]) -> str:
    """What a model identity stands for without its code and package fingerprints, nor its seed: the models a
    board row keeps only the newest code of (older lineages are hidden, not averaged in)."""
    mixer = _mixer_without_code(subject_parts.get("mixer") or {})
    train = {k: v for k, v in (subject_parts.get("train") or {}).items() if k != "seed"}
    rest = {k: v for k, v in subject_parts.items() if k not in CODE_PARTS and k not in ("mixer", "train")}
    return content_hash({"mixer": mixer, "train": train, **rest})


def budget_series(subject_parts: dict[str, Any]) -> tuple[str, str, int] | None:
    """A model's place in a token-budget series (docs/rank_stability.md): ``(series, member, token_budget)``.
    ``series`` hashes what models of one comparable set share: the identity without the mixer, the code and
    package fingerprints, the weights, the seed and the token budget; ``member`` the mixer and its config without
    code fingerprints. None for a subject without a training config (a mixer-scoped run's)."""
    train = subject_parts.get("train")
    mixer = subject_parts.get("mixer")
    if not isinstance(train, dict) or not isinstance(mixer, dict):
        return None
    budget = train.get("token_budget")
    if isinstance(budget, bool) or not isinstance(budget, int):
        return None
    rest = {k: v for k, v in subject_parts.items()
            if k not in CODE_PARTS and k not in ("mixer", "train", "weights_sha256")}
    shared = {k: v for k, v in train.items() if k not in ("seed", "token_budget")}
    member = _mixer_without_code(mixer)
    return content_hash({"train": shared, **rest}), content_hash(member), budget


def gate_identity(mixer: str, mixer_config: dict[str, Any], backbone: dict[str, Any], device: str,
                  gate_config: dict[str, Any], gate_version: int) -> str:
    """The gate's verdict key: the mixer and config at a backbone (its vocabulary left out: the gate is blind to
    it), the device type, the gate's config and version, and the packages."""
    return content_hash({
        "gate_version": gate_version,
        "gate_config": gate_config,
        "mixer": mixer_identity(mixer, mixer_config).id,
        "backbone": {k: v for k, v in backbone.items() if k != "vocab_size"},
        "device": str(device).split(":")[0],
        "packages": identity_packages(),
    })


def train_id(spec: RunSpec) -> str:
    """A training run's spec as written: a checkpoint folder resumes only the same spec. Unlike
    :func:`model_identity` it holds no code fingerprint, so a resumed run survives a code change."""
    return content_hash(spec.to_json())


def suite_identity(suite: str, suite_config: Any) -> dict[str, Any]:
    """The parts of a run's identity that come from the suite: name, version, source and full config."""
    from harness.registry import SUITES

    entry = SUITES.get(suite)
    return {
        "suite": suite,
        "suite_version": int(getattr(entry.cls, "version", 1)),
        "suite_code": plugin_fingerprint(entry.cls),
        "suite_config": to_dict(suite_config),
    }


def run_identity(subject: Identity, suite: str, suite_config: Any, device: dict[str, Any] | None = None,
                 extra: dict[str, Any] | None = None) -> Identity:
    """A run of ``suite`` (with its full config) on ``subject`` (a model's or, for mixer-scoped suites, a
    mixer's identity); ``device`` is the device descriptor of device-dependent suites, else None; ``extra`` is
    the suite's :meth:`harness.suite.Suite.identity_parts`."""
    parts: dict[str, Any] = {"subject": subject.id, **suite_identity(suite, suite_config)}
    if extra:
        parts["suite_inputs"] = extra
    if device is not None:
        parts["device"] = device
    run = _identity(parts)
    # the subject's own parts beside the id's inputs, so a manifest shows every input of its id (not hashed:
    # the subject's id already stands for them)
    return Identity(run.id, {**run.parts, "subject_parts": subject.parts})
