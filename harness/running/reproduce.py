"""``mixbench reproduce``: run a target's steps through the ordinary suites, check its claim on the stored runs,
and keep the verdict in the results store (docs/reproductions.md; the targets' API is :mod:`harness.reproduction`).

Runs go through :func:`harness.running.runner.run_requests` (model suites) and
:func:`harness.running.evaluate.evaluate` (mixer suites), so they land in the store like any other and nothing is
computed twice. The verdict, with every check's measured interval, the run ids behind it, the commit and the wall
time, is written to ``reproductions/<scale>/<target>.json`` beside the runs (:func:`save_record`), where
``mixbench publish`` finds it for the site's Reproductions page.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.errors import MixbenchError
from harness.reproduction import (
    CHECK, KINDS, REPRODUCED, SCALES, Check, NegativeResult, ReproductionRecord, RunIndex, Step, Subject, Target,
    Verdicts, record_path, verdict_note,
)

__all__ = ["REPRODUCED", "ReproducePlan", "TargetResult", "load_reproduce_plan", "parse_subject_swaps",
           "planned_steps", "render_listing", "render_result", "run_target", "save_record"]


#: the keys of a reproduce plan (plans/reproduce.yaml)
PLAN_KEYS = ("targets", "scales")


@dataclass(frozen=True)
class ReproducePlan:
    """Which targets a nightly checks, and per scale the device it runs on (``mixbench reproduce --plan``)."""

    targets: tuple[str, ...]
    devices: Mapping[str, str]  # scale -> device
    #: scale -> targets the plan leaves to another scale there (too slow for its budget), said when it runs
    skips: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def targets_at(self, scale: str) -> tuple[str, ...]:
        return tuple(t for t in self.targets if t not in self.skips.get(scale, ()))


def load_reproduce_plan(path: str) -> ReproducePlan:
    """Read a reproduce plan (YAML with ``targets`` and ``scales: {cpu: {device: cpu, skip: [NAME]}, gpu: {device:
    cuda}}``; ``skip`` names targets left to another scale there); every name is checked before anything runs, and
    a bad file is one sentence."""
    from pathlib import Path

    from harness.errors import ConfigError
    from harness.registry import TARGETS
    from harness.running.plan import read_plan_yaml

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"reproduce plan {path} does not exist; pass a YAML file such as plans/reproduce.yaml.")
    raw = read_plan_yaml(file)
    if not isinstance(raw, dict) or set(raw) - set(PLAN_KEYS):
        raise ConfigError(f"reproduce plan {path} must be a mapping with the keys {', '.join(PLAN_KEYS)}.")
    targets = raw.get("targets")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise ConfigError(f"reproduce plan {path}: 'targets' must be a list of target names.")
    for name in targets:
        TARGETS.get(name)
    devices, skips = {}, {}
    for scale, block in (raw.get("scales") or {}).items():
        if scale not in SCALES or not isinstance(block, dict) or not isinstance(block.get("device", "cpu"), str) \
                or set(block) - {"device", "skip"}:
            raise ConfigError(f"reproduce plan {path}: 'scales' maps {', '.join(SCALES)} to {{device: NAME, skip: "
                              f"[TARGET]}}, got {scale!r}: {block!r}.")
        devices[scale] = block.get("device", "cpu")
        skip = block.get("skip", [])
        if not isinstance(skip, list) or not all(isinstance(t, str) and t in targets for t in skip):
            raise ConfigError(f"reproduce plan {path}: scales.{scale}.skip must list targets of the plan, got "
                              f"{skip!r}.")
        skips[scale] = tuple(skip)
    return ReproducePlan(tuple(targets), devices, skips)


@dataclass
class TargetResult(Verdicts):
    name: str
    scale: str
    checks: list[Check]
    wall_s: float
    run_ids: tuple[str, ...] = ()
    device: str = "cpu"
    negatives: tuple[NegativeResult, ...] | None = None  # None: not run


def planned_steps(target: Target, scale: str, device: str = "cpu", negatives: bool = False) -> list[Step]:
    """``target``'s steps at ``scale`` (with ``negatives``, its negatives' steps after them), every mixer and suite
    config checked (nothing runs). A built-in target without a negative is a bug: its verdict could not fail."""
    from harness.registry import MIXERS
    from harness.running.planned import PlannedRun

    if scale not in SCALES:
        raise MixbenchError(f"reproduce: scale must be one of {', '.join(SCALES)}, got '{scale}'.")
    if scale == "gpu":
        check_gpu_scale(device)
    steps = list(target.steps(scale))
    if negatives:
        declared = target.negatives(scale)
        if not declared:
            raise MixbenchError(f"reproduce --negatives: target {target.name!r} declares no negative (a run for which "
                                "its claim must fail), so nothing shows its verdict could fail; docs/reproductions.md.")
        for negative in declared:
            steps += target.negative_target(negative).steps(scale)
    for step in steps:
        for mixer in (*step.mixers, *step.controls):
            MIXERS.get(mixer)
        PlannedRun.make(step.suite, step.suite_config, device=device)
    return steps


def check_gpu_scale(device: str) -> None:
    """Refuse the gpu scale off a GPU: its protocols are the sources' own sizes (a 16k-token tokenizer, models
    trained for hours), and it used to start them on the CPU without a word."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return
    why = (f"--device {device} would run them on the CPU" if torch.cuda.is_available() else
           "this machine has no CUDA device (torch.cuda.is_available() is False)")
    raise MixbenchError(f"reproduce --scale gpu runs the sources' GPU-sized protocols, but {why}; use --scale cpu "
                        "for the protocol sized for a CPU, or run it on a GPU machine.")


def run_target(target: Target, scale: str, store: Any, device: str = "cpu", progress: bool = True,
               force: bool = False, negatives: bool = False) -> TargetResult:
    """Run every step of ``target`` at ``scale`` (what the store holds is reused) and check its claim; with
    ``negatives``, run each negative's protocol too and check the claim on it (it must not be reproduced)."""
    t0 = time.perf_counter()
    planned_steps(target, scale, device, negatives)
    run_ids = _run_steps(target, scale, store, device, progress, force, target.name)
    checks = target.checks(RunIndex(store, run_ids), scale)
    results: list[NegativeResult] | None = [] if negatives else None
    for negative in target.negatives(scale) if negatives else ():
        twin = target.negative_target(negative)
        ids = _run_steps(twin, scale, store, device, progress, force, f"{target.name} (negative: {negative.label})")
        results.append(NegativeResult(negative.label, negative.why, dict(negative.swaps), dict(negative.settings),
                                      tuple(twin.checks(RunIndex(store, ids), scale))))
        run_ids += ids
    return TargetResult(target.name, scale, checks, time.perf_counter() - t0, tuple(dict.fromkeys(run_ids)), device,
                        None if results is None else tuple(results))


def _run_steps(target: Target, scale: str, store: Any, device: str, progress: bool, force: bool,
               label: str) -> list[str]:
    """Score every step of ``target`` through the ordinary routes; the run ids, in order."""
    from harness.registry import SUITES
    from harness.running.evaluate import EvalOptions, evaluate
    from harness.running.planned import PlannedRun
    from harness.running.runner import GridRequest, JobOptions, run_requests

    steps = target.steps(scale)
    run_ids: list[str] = []
    for i, step in enumerate(steps, 1):
        if progress:
            print(f"[mixbench] {label}: step {i}/{len(steps)}: {step.suite} on {', '.join(step.mixers)}",
                  file=sys.stderr, flush=True)
        if SUITES.get(step.suite).cls.scope == "mixer":
            for mixer in step.mixers:
                run = PlannedRun.make(step.suite, step.suite_config, device=device)
                out = evaluate(None, run, store, EvalOptions(force=force, progress=progress), mixer=mixer,
                               mixer_config=dict(step.mixer_configs.get(mixer, {})), preset=step.preset)
                run_ids.append(out.run_id)
            continue
        req = GridRequest(preset=step.preset, mixers=list(step.mixers), suites=[step.suite],
                          mixer_configs={m: dict(c) for m, c in step.mixer_configs.items()},
                          train_overrides=dict(step.train), data_overrides=dict(step.data),
                          suite_overrides={step.suite: dict(step.suite_config)},
                          options=JobOptions(device=device, force=force, progress=progress),
                          controls=list(step.controls))
        run_ids.extend(run_requests([req], store).run_ids)
    return run_ids


def save_record(store: Any, target: Target, result: TargetResult) -> str:
    """Keep ``result`` in ``store`` as the target's latest verdict at its scale (replacing the one before: the
    runs themselves stay, and a nightly's history keeps earlier verdicts); returns where it landed."""
    from harness.store.provenance import code_location, git_revision

    revision = git_revision(code_location())
    commit = None if not revision or not revision["commit"] else \
        revision["commit"][:12] + (" (with uncommitted changes)" if revision["dirty"] else "")
    record = ReproductionRecord(
        result.name, result.scale, tuple(result.checks), round(result.wall_s, 1),
        datetime.now(UTC).isoformat(timespec="seconds"), commit, result.device,
        target.source, target.published, target.checked, target.protocol(result.scale), target.departures,
        result.run_ids, target.kind, result.negatives)
    return store.write_file(record_path(result.scale, result.name), record.to_json())


def parse_subject_swaps(specs: Sequence[str]) -> dict[str, Subject]:
    """``ROLE=MIXER`` or ``ROLE=MIXER:{json}`` (``--subject``) as role -> subject; a bad spec is one sentence."""
    import json

    from harness.registry import MIXERS

    swaps: dict[str, Subject] = {}
    for spec in specs:
        role, sep, rest = spec.partition("=")
        mixer, _, raw = rest.partition(":")
        if not sep or not role.strip() or not mixer.strip():
            raise MixbenchError(f"reproduce --subject {spec!r}: expected ROLE=MIXER or ROLE=MIXER:{{json config}}.")
        try:
            config = json.loads(raw) if raw else {}
        except ValueError as exc:
            raise MixbenchError(f"reproduce --subject {spec!r}: the config is not JSON ({exc}).") from None
        if not isinstance(config, dict):
            raise MixbenchError(f"reproduce --subject {spec!r}: the config must be a JSON object.")
        MIXERS.get(mixer.strip())
        swaps[role.strip()] = Subject(mixer.strip(), config)
    return swaps


def render_result(result: TargetResult) -> str:
    """Expected against measured, per check, and the target's verdict; then each negative's checks and verdict."""
    note = verdict_note(result.scale)
    head = f"{result.name} (scale {result.scale}, {result.wall_s:.0f} s): {result.verdict.upper()}"
    if result.verdict != result.own_verdict:
        failed = [n.label for n in result.negatives or () if not n.passed]
        head += f" (its own checks: {result.own_verdict}; the negative {', '.join(failed)} was reproduced too)"
    elif result.negatives is None:
        head += " (negatives not run: --negatives)"
    lines = [head + (f" ({note})" if note else "")]
    lines += _check_lines(result.checks, "  ")
    for negative in result.negatives or ():
        verdict = negative.verdict + ("" if negative.passed else ": the claim passed where it must fail")
        lines.append(f"  negative: {negative.label} ({negative.why}): {verdict}")
        lines += _check_lines(negative.checks, "    ")
    return "\n".join(lines)


def _check_lines(checks: Sequence[Check], indent: str) -> list[str]:
    width = max([len(c.what) for c in checks] + [5])
    lines = []
    for c in checks:
        measured = c.measured.render() if c.measured is not None else "missing"
        note = f"  ({c.note})" if c.note else ""
        verdict = c.verdict if c.counts else f"({c.verdict}; reported only)"
        verdict = f"{verdict} [precondition]" if c.precondition else verdict
        lines.append(f"{indent}{c.what:<{width}}  expected {c.expected:<10} measured {measured:<44} {verdict}{note}")
    return lines


#: the headings of --list, by kind: reproductions of published claims first, checks of this harness apart
KIND_HEADINGS = {"reproduction": "Reproductions of published claims",
                 CHECK: "Checks of this harness (a property mixbench must have, not a published result)"}


def render_listing(entries: Sequence[Any], scale: str = "cpu") -> str:
    """``mixbench reproduce --list``: per kind, each target's source, claims, protocol, negatives and cost."""
    targets = [entry.cls(entry.make_config()) for entry in entries]
    out = []
    for kind in KINDS:
        blocks = []
        for t in (t for t in targets if t.kind == kind):
            negatives = "; ".join(f"{n.label} ({n.why})" for n in t.negatives(scale)) or "none declared"
            blocks.append("\n".join([
                t.name,
                f"  source:     {t.source}",
                f"  published:  {t.published}",
                f"  checked:    {t.checked}",
                f"  protocol:   {t.protocol(scale)}",
                f"  negatives:  {negatives}",
                f"  departures: {t.departures}",
                f"  cost:       {t.cost}",
            ]))
        if blocks:
            out.append(f"== {KIND_HEADINGS[kind]} ==\n\n" + "\n\n".join(blocks))
    return "\n\n".join(out)
