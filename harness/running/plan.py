"""Plan files: a grid written down once and run every night (``mixbench run PLAN.yaml``, ``mixbench nightly``).

A plan is YAML (or JSON, which YAML reads too)::

    name: tiny-nightly              # snapshots go under nightly/<name>/ in the store (default: the file's stem)
    presets: [tiny]                 # or `preset: tiny`
    mixers: [protot, attention]     # or a mapping name -> mixer config, e.g. {protot: {n_prototypes: 16}}
    controls: [none, mean]          # controls trained beside them (docs/controls.md); default: every one; []: none
    seeds: [0, 1]
    suites:                         # a list, or a mapping name -> suite config
      perplexity: {max_windows: 16, bootstrap: 200}
    train: {token_budget: 32768}    # TrainConfig overrides (seed comes from `seeds`)
    data: {max_train_docs: 40}      # DataConfig overrides
    backbone: {context: 128}        # BackboneConfig overrides
    match: params                   # params | none: MLP widths matched to the reference's parameters (default:
                                    # the preset's; docs/protocol.md)
    sweep: {lr: [0.001, 0.002, 0.004]}   # tune these training values per mixer on validation first, into
                                    # recipes/<preset>.json (as `mixbench tune` does), then train with them
    ladder:                         # optional: the grid once per rung, each rung's overrides on top of the above
      - {d_model: 64, n_layers: 2, tokens: 81920}     # shorthand for backbone d_model/n_layers, train token_budget
      - {backbone: {d_model: 128, n_layers: 4}, train: {token_budget: 327680, lr: 0.002}}
    device: auto                    # auto | cpu | cuda
    kernel: null                    # force a mixer kernel
    resources: {cpus: 1, gpus: 0}   # per job (one trained model + its suites)
    nightly:                        # regression tolerances (see Tolerance)
      rel_tolerance: 0.01
      suites: {throughput: {rel_tolerance: 0.25}}

Loading validates everything a run would only discover later: unknown keys (with the closest valid one),
types, mixer / suite / preset names and every config value (each model is built on the meta device), so a
mistake in a nightly plan fails in a second, not after an hour of training.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.config import TrainConfig, check_seed
from harness.errors import ConfigError, MixbenchError
from harness.running.runner import GridRequest, JobOptions, Resources, check_grid_size
from harness.values import build_config, coerce_values, option

PLAN_KEYS = (
    "name", "preset", "presets", "mixers", "mixer_configs", "controls", "seeds", "suites", "train", "data",
    "backbone", "device", "kernel", "resources", "nightly", "ladder", "match", "sweep",
)
#: the keys of one ladder rung: the shorthands, then the two override mappings they fill
RUNG_KEYS = ("d_model", "n_layers", "tokens", "backbone", "train")
TOLERANCE_KEYS = ("rel_tolerance", "abs_tolerance", "ci_scale")
#: a plan is a few lines of YAML; a file this large is a mistake (or an attack), refused before parsing
MAX_PLAN_BYTES = 1 << 20
#: the plan's name names a folder and is part of every snapshot's path
MAX_NAME_CHARS = 100
Z95 = 1.959964  # two-sided 95% normal quantile: the margin of a difference of two independent estimates
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass(frozen=True)
class Tolerance:
    """When a change of a metric between two nights counts as a regression.

    A metric regresses when it moves in its bad direction (``higher_is_better`` says which) by more than
    ``max(abs_tolerance, rel_tolerance * |previous|, ci_scale * 1.96 * sqrt(se_prev**2 + se_now**2))``, where
    ``se`` is a night's standard error, read off its interval by the interval's own kind and level
    (:meth:`harness.stats.Interval.normal_stderr`; a min-max range has none and adds nothing). Two independent
    estimates differ by less than ``1.96 * sqrt(se1**2 + se2**2)`` 95% of the time (normal approximation), so
    ``ci_scale = 1`` flags only changes the suite's own uncertainty cannot explain; the relative floor covers
    metrics without an interval (timings).
    """

    rel_tolerance: float = option(0.01, "relative change that counts as a regression", min=0)
    abs_tolerance: float = option(0.0, "absolute change that counts as a regression", min=0)
    ci_scale: float = option(1.0, "multiple of the combined 95% margin of both nights that counts as a regression",
                             min=0)

    def __post_init__(self) -> None:
        for name in TOLERANCE_KEYS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"nightly: {name} must be a number >= 0, got {value!r}.")
            object.__setattr__(self, name, float(value))

    def threshold(self, previous: float, se_prev: float | None, se_now: float | None) -> float:
        combined = ((se_prev or 0.0) ** 2 + (se_now or 0.0) ** 2) ** 0.5
        return max(self.abs_tolerance, self.rel_tolerance * abs(previous), self.ci_scale * Z95 * combined)


@dataclass(frozen=True)
class NightlyPolicy:
    """Tolerances for the nightly comparison, with optional per-suite overrides."""

    default: Tolerance = field(default_factory=Tolerance)
    suites: dict[str, Tolerance] = field(default_factory=dict)

    def for_suite(self, suite: str) -> Tolerance:
        return self.suites.get(suite, self.default)


@dataclass(frozen=True)
class Rung:
    """One rung of a ladder (a scaling study, docs/scaling.md): backbone and training overrides applied on top of
    the plan's own, so one plan trains every mixer at several widths, depths and token budgets."""

    backbone: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted({**self.backbone, **self.train}.items())]
        return ", ".join(parts) or "the plan's own settings"


@dataclass(frozen=True)
class Plan:
    """A validated grid: mixers x presets x seeds, each model scored by every suite."""

    name: str
    presets: tuple[str, ...]
    mixers: tuple[str, ...]
    suites: tuple[str, ...]
    seeds: tuple[int, ...] = (0,)
    mixer_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    suite_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    backbone: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"
    kernel: str | None = None
    resources: Resources = field(default_factory=Resources)
    nightly: NightlyPolicy = field(default_factory=NightlyPolicy)
    source: str = ""  # the file it came from, for messages
    controls: tuple[str, ...] | None = None  # None: every registered control; (): none
    ladder: tuple[Rung, ...] = ()  # empty: one grid with the plan's own overrides
    match: str | None = None  # params | none; None: the preset's
    sweep: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # training values tuned first (mixbench tune)

    def __post_init__(self) -> None:
        if not self.name or not set(self.name) <= _NAME_CHARS or self.name.startswith("."):
            raise ConfigError(
                f"plan name {self.name!r} must be letters, digits, '-', '_' or '.' (it names a folder in the store)."
            )
        if len(self.name) > MAX_NAME_CHARS:
            raise ConfigError(
                f"plan name {self.name[:40]}... is {len(self.name)} characters long; it names a folder in the store, "
                f"so give one of at most {MAX_NAME_CHARS} (the `name:` key, or the file's name)."
            )
        for key in ("presets", "mixers", "suites", "seeds"):
            values = getattr(self, key)
            if not values:
                raise ConfigError(f"plan {self.name}: '{key}' is empty; list at least one.")
            if len(set(values)) != len(values):
                raise ConfigError(f"plan {self.name}: '{key}' lists a value twice: {list(values)}.")
        for seed in self.seeds:
            check_seed(seed, f"plan {self.name}: each seed")
        check_grid_size(len(self.presets) * len(self.rungs) * len(self.mixers) * len(self.seeds),
                        f"plan {self.name}")
        if "seed" in {k for rung in self.ladder for k in rung.train}:
            raise ConfigError(f"plan {self.name}: set seeds with 'seeds: [...]', not in a ladder rung's train.")
        if len(set(map(repr, self.ladder))) != len(self.ladder):
            raise ConfigError(f"plan {self.name}: the ladder lists a rung twice.")
        for what, configs, names in (
            ("mixer_configs", self.mixer_configs, self.mixers), ("suites", self.suite_configs, self.suites),
        ):
            extra = sorted(set(configs) - set(names))
            if extra:
                raise ConfigError(
                    f"plan {self.name}: {what} has config for {', '.join(extra)}, which the plan does not run."
                )
        if "seed" in self.train:
            raise ConfigError(f"plan {self.name}: set seeds with 'seeds: [...]', not train.seed.")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"plan {self.name}: device must be auto, cpu or cuda, got {self.device!r}.")
        if self.match not in (None, "params", "none"):
            raise ConfigError(f"plan {self.name}: match must be params or none, got {self.match!r}.")
        names = set(TrainConfig.__dataclass_fields__) - {"seed"}
        for key, values in self.sweep.items():
            if key not in names:
                raise ConfigError(f"plan {self.name}: sweep names '{key}', not a training value "
                                  f"({', '.join(sorted(names))}).")
            if not values:
                raise ConfigError(f"plan {self.name}: sweep.{key} lists no values.")
            if key in self.train:
                raise ConfigError(f"plan {self.name}: '{key}' is both swept and fixed in train; give it in one place.")
        extra = sorted(set(self.nightly.suites) - set(self.suites))
        if extra:
            raise ConfigError(
                f"plan {self.name}: nightly.suites names {', '.join(extra)}, which the plan does not run."
            )

    @property
    def all_mixers(self) -> tuple[str, ...]:
        """The plan's mixers and the controls trained beside them."""
        from harness.registry import resolve_controls

        controls = resolve_controls(self.controls, f"plan {self.name}: controls")
        return (*self.mixers, *(c for c in controls if c not in self.mixers))

    @property
    def rungs(self) -> tuple[Rung, ...]:
        """The ladder, or the one implicit rung of a plan without one."""
        return self.ladder or (Rung(),)

    @property
    def jobs(self) -> int:
        return len(self.presets) * len(self.rungs) * len(self.all_mixers) * len(self.seeds)

    def check(self) -> None:
        """Validate names and every config value against the registries (each model built on ``meta``)."""
        from harness.registry import MIXERS, SUITES
        from harness.model.specs import make_run_spec

        where = self.source or f"plan {self.name}"
        for suite in self.suites:
            with _located(where, f"suites.{suite}"):
                SUITES.get(suite).make_config(self.suite_configs.get(suite))
        for mixer in self.mixers:
            kernels = MIXERS.get(mixer).cls.kernels
            if self.kernel not in (None, "reference", *kernels):  # "reference": every mixer's first kernel
                raise ConfigError(
                    f"plan {self.name}: kernel '{self.kernel}' is not one of mixer {mixer}'s ({', '.join(kernels)}); "
                    "drop 'kernel' to let each mixer pick its fastest, or run the mixers in separate plans."
                )
        for preset in self.presets:
            for rung in self.rungs:
                backbone, train = {**self.backbone, **rung.backbone}, {**self.train, **rung.train}
                for mixer in self.all_mixers:
                    at = f"preset {preset}, mixer {mixer}" + (f", rung {rung.label}" if self.ladder else "")
                    with _located(where, at):
                        make_run_spec(mixer, preset, self.mixer_configs.get(mixer), backbone, train, self.data,
                                      match=self.match)

    def requests(
        self, device: str, force: bool = False, progress: bool = True, plugins: tuple[str, ...] = (),
        skip_gate: bool = False, yes: bool = False,
    ) -> list[GridRequest]:
        """One :class:`GridRequest` per preset and ladder rung (the runner turns them into jobs; a rung whose
        training is estimated past the time limit is refused there unless ``yes``)."""
        return [
            GridRequest(
                preset=preset,
                mixers=list(self.mixers),
                suites=list(self.suites),
                seeds=list(self.seeds),
                mixer_configs={m: dict(c) for m, c in self.mixer_configs.items()},
                backbone_overrides={**self.backbone, **rung.backbone},
                train_overrides={**self.train, **rung.train},
                data_overrides=dict(self.data),
                suite_overrides={s: dict(c) for s, c in self.suite_configs.items()},
                options=JobOptions(device=device, kernel=self.kernel, force=force, progress=progress,
                                   resources=self.resources, plugins=tuple(plugins), skip_gate=skip_gate,
                                   yes=yes),
                controls=None if self.controls is None else list(self.controls),
                match=self.match,
            )
            for preset in self.presets
            for rung in self.rungs
        ]

    def covers(self, suite: str | None, mixer: str | None, preset: str | None, seed: Any) -> bool:
        """Whether a run with these manifest fields belongs to this plan's grid."""
        return (
            suite in self.suites and mixer in self.all_mixers and preset in self.presets
            and (seed is None or seed in self.seeds)
        )


@contextlib.contextmanager
def _located(where: str, part: str) -> Iterator[None]:
    """Prefix a config error with the plan file and the part of it that holds the bad value."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{where} ({part}): {exc}") from None


def load_plan(path: str | Path, check: bool = True) -> Plan:
    """Read and validate a plan file; every mistake is a :class:`ConfigError` naming the key and the fix."""
    path = Path(path)
    if not path.is_file():
        raise MixbenchError(f"plan file {path} does not exist; pass a YAML file (see harness/running/plan.py for its keys).")
    raw = read_plan_yaml(path)
    plan = plan_from_dict(raw, default_name=path.stem, source=str(path))
    if check:
        plan.check()
    return plan


class _PlanLoader(yaml.SafeLoader):
    """YAML as a plan needs it: no aliases (``*name``: a few lines of them expand to billions of items), and a key
    given twice is an error instead of the second silently replacing the first."""

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in a plan; write the "
                                              "values out", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice in one mapping; keep one", key_node.start_mark)
        return super().construct_mapping(node, deep)


def read_plan_yaml(path: Path) -> Any:
    """The plan file's YAML, or a ConfigError of one sentence: too large, not UTF-8 text, bad YAML, aliases, a
    repeated key, a number too long to read."""
    size = path.stat().st_size
    if size > MAX_PLAN_BYTES:
        raise ConfigError(f"plan {path} is {size:,} bytes; a plan is a short YAML file (at most {MAX_PLAN_BYTES:,} "
                          "bytes): check the path.")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"plan {path} is not a text file (byte {exc.start} is not UTF-8); pass a YAML plan.") from None
    if "\x00" in text:
        raise ConfigError(f"plan {path} is not a text file (it holds NUL bytes); pass a YAML plan.")
    try:
        return yaml.load(text, Loader=_PlanLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        where = " ".join(str(exc).replace('"<unicode string>"', str(path)).split())
        raise ConfigError(f"plan {path} is not valid YAML ({where}); fix it.") from None
    except ValueError as exc:  # PyYAML's int(): a number of more than 4,300 digits
        raise ConfigError(f"plan {path} holds a value that cannot be read ({exc}); fix it.") from None


def plan_from_dict(raw: Any, default_name: str = "plan", source: str = "") -> Plan:
    where = source or "plan"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping of keys ({', '.join(PLAN_KEYS)}), got {type(raw).__name__}.")
    _unknown(raw, PLAN_KEYS, where)
    if "preset" in raw and "presets" in raw:
        raise ConfigError(f"{where}: give 'preset' or 'presets', not both.")
    presets = _names(raw.get("presets", raw.get("preset")), "presets", where)
    mixers, mixer_configs = _names_with_configs(raw.get("mixers"), "mixers", where)
    extra_configs = _mapping(raw.get("mixer_configs"), "mixer_configs", where)
    for mixer, cfg in extra_configs.items():
        if mixer_configs.get(mixer):
            raise ConfigError(f"{where}: mixer {mixer} is configured both under 'mixers' and 'mixer_configs'.")
        mixer_configs[mixer] = _mapping(cfg, f"mixer_configs.{mixer}", where)
    suites, suite_configs = _names_with_configs(raw.get("suites"), "suites", where)
    seeds = raw.get("seeds", [0])
    seeds = [seeds] if isinstance(seeds, int) and not isinstance(seeds, bool) else seeds
    if not isinstance(seeds, list):
        raise ConfigError(f"{where}: seeds must be a list of integers, got {seeds!r}.")
    controls = raw.get("controls")
    if controls is not None:
        controls = [] if controls == [] else _names(controls, "controls", where)
    resources = _mapping(raw.get("resources"), "resources", where)
    _unknown(resources, [f.name for f in dataclasses.fields(Resources)], f"{where}: resources")
    resources = coerce_values(Resources, resources, f"{where}: resources")  # .nan / "2" / true are refused
    device = raw.get("device") or "auto"
    kernel = raw.get("kernel")
    if not isinstance(device, str) or (kernel is not None and not isinstance(kernel, str)):
        raise ConfigError(f"{where}: device and kernel must be strings.")
    return Plan(
        name=str(raw.get("name") or default_name),
        presets=tuple(presets),
        mixers=tuple(mixers),
        suites=tuple(suites),
        seeds=tuple(seeds),
        mixer_configs=mixer_configs,
        suite_configs=suite_configs,
        train=_mapping(raw.get("train"), "train", where),
        data=_mapping(raw.get("data"), "data", where),
        backbone=_mapping(raw.get("backbone"), "backbone", where),
        device=device,
        kernel=kernel,
        resources=Resources(**resources),
        nightly=_nightly(raw.get("nightly"), where),
        source=source,
        controls=None if controls is None else tuple(controls),
        ladder=_ladder(raw.get("ladder"), where),
        match=raw.get("match"),
        sweep=_sweep(raw.get("sweep"), where),
    )


def _sweep(value: Any, where: str) -> dict[str, tuple[Any, ...]]:
    """``sweep:`` as field -> values (a single value is a one-point grid)."""
    raw = _mapping(value, "sweep", where)
    grid = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in raw.items()}
    # YAML reads 1e-3 as a string: each value is made the field's type (and checked) as the CLI's --grid does
    return {k: tuple(coerce_values(TrainConfig, {k: v}, f"{where}: sweep.{k}")[k] for v in values)
            for k, values in grid.items()}


def _ladder(value: Any, where: str) -> tuple[Rung, ...]:
    """``ladder:`` as rungs; each is a mapping of the shorthands (d_model, n_layers, tokens) and/or full
    ``backbone``/``train`` override mappings (a shorthand and its long form together is an error)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: 'ladder' must be a non-empty list of rungs (mappings), got {value!r}.")
    rungs = []
    for i, raw in enumerate(value):
        at = f"{where}: ladder[{i}]"
        raw = _mapping(raw, f"ladder[{i}]", where)
        if not raw:
            raise ConfigError(f"{at} is empty; give d_model, n_layers, tokens, backbone or train.")
        _unknown(raw, RUNG_KEYS, at)
        backbone = _mapping(raw.get("backbone"), f"ladder[{i}].backbone", where)
        train = _mapping(raw.get("train"), f"ladder[{i}].train", where)
        for short, target, key in (("d_model", backbone, "d_model"), ("n_layers", backbone, "n_layers"),
                                   ("tokens", train, "token_budget")):
            if short in raw:
                if key in target:
                    raise ConfigError(f"{at}: give '{short}' or its long form '{key}', not both.")
                target[key] = raw[short]
        rungs.append(Rung(backbone, train))
    return tuple(rungs)


def _unknown(raw: dict[str, Any], known: Any, where: str) -> None:
    known = list(known)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{where}: unknown key '{key}'.{hint} Valid keys: {', '.join(known)}.")


def _mapping(value: Any, key: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' must be a mapping (key: value), got {value!r}.")
    return {str(k): v for k, v in value.items()}


def _names(value: Any, key: str, where: str) -> list[str]:
    if value is None:
        raise ConfigError(f"{where}: '{key}' is required.")
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{where}: '{key}' must be a name or a list of names, got {value!r}.")
    return values


def _names_with_configs(value: Any, key: str, where: str) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``[a, b]`` or ``{a: {cfg}, b: null}`` -> names in order and their configs."""
    if isinstance(value, dict):
        return [str(k) for k in value], {str(k): _mapping(v, f"{key}.{k}", where) for k, v in value.items()}
    return _names(value, key, where), {}


def _nightly(value: Any, where: str) -> NightlyPolicy:
    raw = _mapping(value, "nightly", where)
    _unknown(raw, [*TOLERANCE_KEYS, "suites"], f"{where}: nightly")
    default = build_config(Tolerance, {k: raw[k] for k in TOLERANCE_KEYS if k in raw}, f"{where}: nightly")
    per_suite = {}
    for suite, over in _mapping(raw.get("suites"), "nightly.suites", where).items():
        over = _mapping(over, f"nightly.suites.{suite}", where)
        _unknown(over, TOLERANCE_KEYS, f"{where}: nightly.suites.{suite}")
        over = coerce_values(Tolerance, over, f"{where}: nightly.suites.{suite}")
        per_suite[suite] = dataclasses.replace(default, **over)
    return NightlyPolicy(default, per_suite)
