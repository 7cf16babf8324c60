"""Nightly runs (docs/DESIGN.md §6): run what a plan is missing, snapshot the metrics, compare with the night before.

``mixbench nightly PLAN.yaml`` runs the plan's grid (jobs already in the store are skipped, interrupted ones
resume), then records a snapshot of every metric of the plan's runs in the store::

    nightly/<plan>/<YYYYmmddTHHMMSS.ffffff>Z.json   rows (suite, model, preset, metric, value, interval, code
                                                  revision and fingerprints, ...), the grid's summary, and the
                                                  comparison with the night before
    nightly/<plan>/history.csv, history.md         one row per metric, one column per night
    nightly/<plan>/plots/<suite>__<metric>.png     headline metrics across nights, one line per model

The rows are the board's (:func:`harness.reporting.table.table_from_runs`: one per model and canonical column, seeds
averaged), restricted to the plan's grid. Because a run's identity includes the code that computed it, a night
with new code recomputes exactly what the code change touches, and each side of a change names the code revision
and the mixer's and suite's source fingerprints behind it. A metric regresses when it moves in its bad direction
by more than the plan's tolerance, which grows with both nights' uncertainty (:class:`harness.running.plan.Tolerance`:
intervals are put on one scale by their kind and level; a min-max range adds nothing), so noise is not an alarm
and a real drop is. Regressions, metrics that disappeared, and jobs that failed make the command exit 1; the
snapshot is written either way, so the next night compares with what this night actually measured.

Every snapshot is read field by field (:func:`read_snapshot`). A corrupt one (not JSON, rows that are not the
rows this module writes, a version no mixbench writes) is moved to ``nightly/<plan>/quarantine/`` with a sentence
and the night compares with the last good one; one of an older layout is named and skipped. Neither can crash a
night, and the history and plots hold the good nights only.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import MixbenchError
from harness.running.plan import NightlyPolicy, Plan
from harness.store.results import ResultsStore, _dumps

FORMAT = "mixbench-nightly"
VERSION = 2
NIGHTLY_DIR = "nightly"
QUARANTINE = "quarantine"  # corrupt snapshots are moved here, out of every comparison
_SNAPSHOT = re.compile(r"^\d{8}T\d{6}\.\d{6}Z\.json$")
KEY_FIELDS = ("suite", "model", "preset", "metric")


def snapshot_id(now: datetime | None = None) -> str:
    """Fixed-width UTC stamp: sorting ids as strings sorts nights in time."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return now.strftime("%Y%m%dT%H%M%S.%fZ")


def row_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in KEY_FIELDS)


def key_text(key: tuple) -> str:
    suite, model, preset, metric = key
    who = "/".join(str(p) for p in (model, preset) if p is not None) or "-"
    return f"{suite}/{metric} [{who}]"


def _in_plan(run, plan: Plan, run_ids: set[str] | None) -> bool:
    m = run.manifest
    if run_ids is not None and run.run_id in run_ids:
        return True
    return plan.covers(m.suite, m.subject.mixer, m.subject.preset, m.subject.seed)


def _code(run) -> dict[str, Any]:
    """The code behind a run: revision, and the fingerprints of the mixer's and the suite's source."""
    git = (run.manifest.provenance or {}).get("git") or {}
    parts = run.manifest.identity
    commit = git.get("commit")
    return {
        "revision": (str(commit)[:12] + ("+dirty" if git.get("dirty") else "")) if commit else "unknown",
        "mixer_code": ((parts.get("subject_parts") or {}).get("mixer") or {}).get("mixer_code"),
        "suite_code": parts.get("suite_code"),
    }


def metric_rows(store: ResultsStore, plan: Plan, run_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """The plan's metric table: the board's cells (one per model and canonical metric, seeds averaged) of the
    runs of the plan's grid (``run_ids``) and of earlier runs the plan covers."""
    from harness.reporting.table import table_from_runs

    runs = [r for r in store.iter_runs(samples=False) if _in_plan(r, plan, run_ids)]
    table = table_from_runs(runs, str(store.root), all_metrics=True)
    rows = []
    for row in table.rows:
        for column in table.columns:
            cell = table.cell(row, column)
            if cell is None:
                continue
            behind = [r for r in row.runs if r.manifest.suite == column.suite]
            newest = max(behind, key=lambda r: r.manifest.written_at)
            rows.append({
                "suite": column.suite, "model": row.label, "preset": row.preset, "metric": column.metric,
                "value": cell.value, "interval": None if cell.interval is None else cell.interval.to_json(),
                "higher_is_better": cell.higher_is_better, "unit": cell.unit, "role": column.role,
                "n_seeds": cell.n_seeds, "headline": column.headline, "model_id": row.key,
                "run_ids": sorted(r.run_id for r in behind), "written_at": newest.manifest.written_at,
                "code": _code(newest),
            })
    return sorted(rows, key=lambda r: _sort_key(row_key(r)))


def _sort_key(key: tuple) -> tuple:
    return tuple("" if v is None else str(v) for v in key)


@dataclass
class Change:
    key: tuple
    status: str  # regression | improvement | unchanged | missing | new
    previous: float | None
    current: float | None
    threshold: float | None = None
    higher_is_better: bool = True
    unit: str = ""
    code_before: dict[str, Any] | None = None
    code_after: dict[str, Any] | None = None

    @property
    def delta(self) -> float | None:
        if self.previous is None or self.current is None:
            return None
        return self.current - self.previous

    def to_json(self) -> dict[str, Any]:
        return {
            **dict(zip(KEY_FIELDS, self.key, strict=True)), "status": self.status, "previous": self.previous,
            "current": self.current, "delta": self.delta, "threshold": self.threshold,
            "higher_is_better": self.higher_is_better, "unit": self.unit, "code_before": self.code_before,
            "code_after": self.code_after,
        }

    def text(self) -> str:
        arrow = "higher is better" if self.higher_is_better else "lower is better"
        if self.status == "missing":
            return f"{key_text(self.key)}: was {_num(self.previous)}, now missing"
        if self.status == "new":
            return f"{key_text(self.key)}: new, {_num(self.current)}"
        text = (
            f"{key_text(self.key)}: {_num(self.previous)} -> {_num(self.current)} {self.unit}".rstrip()
            + f" (change {_num(self.delta)}, tolerance {_num(self.threshold)}, {arrow})"
        )
        if self.code_before or self.code_after:
            text += f"; code {_code_text(self.code_before)} -> {_code_text(self.code_after)}"
        return text


def _code_text(code: dict[str, Any] | None) -> str:
    if not code:
        return "?"
    parts = [str(code.get("revision"))]
    for name in ("mixer_code", "suite_code"):
        if code.get(name):
            parts.append(f"{name.split('_')[0]} {str(code[name])[:8]}")
    return " ".join(parts)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.4g}"


def _stderr(row: dict[str, Any]) -> float | None:
    """The row's uncertainty as a standard error (None for a min-max range or no interval)."""
    from harness.stats import Interval

    iv = row.get("interval")
    if not iv:
        return None
    try:
        return Interval.from_json(iv).normal_stderr()
    except (KeyError, TypeError, ValueError):
        return None


def _value(row: dict[str, Any]) -> float:
    value = row.get("value")
    return math.nan if value is None else float(value)


def compare(previous: list[dict[str, Any]], current: list[dict[str, Any]], policy: NightlyPolicy) -> list[Change]:
    """Every cell of either night, classified against the tolerance of its suite."""
    before = {row_key(r): r for r in previous}
    now = {row_key(r): r for r in current}
    changes = []
    for key in sorted(set(before) | set(now), key=_sort_key):
        old, new = before.get(key), now.get(key)
        ref = new or old
        hib, unit = bool(ref.get("higher_is_better", True)), str(ref.get("unit") or "")
        if new is None:
            changes.append(Change(key, "missing", _value(old), None, None, hib, unit, old.get("code")))
            continue
        if old is None:
            changes.append(Change(key, "new", None, _value(new), None, hib, unit, None, new.get("code")))
            continue
        p, c = _value(old), _value(new)
        threshold = policy.for_suite(key[0]).threshold(p, _stderr(old), _stderr(new))
        if math.isnan(p) or math.isnan(c):
            status = "regression" if math.isnan(c) and not math.isnan(p) else "unchanged"
        else:
            worse = (p - c) if hib else (c - p)
            status = "regression" if worse > threshold else "improvement" if -worse > threshold else "unchanged"
        changes.append(Change(key, status, p, c, threshold, hib, unit, old.get("code"), new.get("code")))
    return changes


@dataclass
class NightlyResult:
    snapshot_id: str
    snapshot_path: str
    previous_id: str | None
    changes: list[Change]
    grid: Any  # harness.running.runner.GridReport
    history_files: list[str] = field(default_factory=list)
    published: str | None = None
    notes: list[str] = field(default_factory=list)  # snapshots left out of the comparison, and why

    def of(self, status: str) -> list[Change]:
        return [c for c in self.changes if c.status == status]

    @property
    def regressions(self) -> list[Change]:
        return self.of("regression")

    @property
    def exit_code(self) -> int:
        """1 when anything needs a human: a regression, a metric that vanished, or a failed job."""
        return 1 if self.regressions or self.of("missing") or self.grid.failures else 0

    def render(self) -> str:
        lines = [self.grid.summary(), f"snapshot {self.snapshot_id} written to {self.snapshot_path}"]
        lines += [f"left out: {note}" for note in self.notes]
        if self.previous_id is None and self.notes:
            lines.append("no earlier snapshot of this plan can be compared with tonight's (see above): tonight starts "
                         "a new comparison.")
        elif self.previous_id is None:
            lines.append("first night of this plan: nothing to compare with.")
        else:
            counts = {s: len(self.of(s)) for s in ("regression", "improvement", "unchanged", "missing", "new")}
            lines.append(
                f"compared with {self.previous_id}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
            )
            sections = (("regression", "REGRESSIONS"), ("missing", "MISSING"), ("improvement", "improvements"))
            for status, title in sections:
                found = self.of(status)
                if found:
                    lines.append(f"{title}:")
                    lines.extend(f"  {c.text()}" for c in found)
        if self.published:
            lines.append(f"site republished to {self.published}")
        return "\n".join(lines)


def list_snapshots(store: ResultsStore, plan_name: str) -> list[str]:
    """Snapshot ids of a plan, oldest first (the plan's folder itself: not its plots or quarantine)."""
    prefix = f"{NIGHTLY_DIR}/{plan_name}"
    names = (p.rsplit("/", 1)[-1] for p in store.list_files(prefix) if p.rsplit("/", 1)[0] == prefix)
    return sorted(n.removesuffix(".json") for n in names if _SNAPSHOT.match(n))


class CorruptSnapshot(MixbenchError):
    """A snapshot file that is not a valid snapshot of this layout (the message says what is wrong)."""


class OtherLayout(MixbenchError):
    """A valid snapshot written by a mixbench with another snapshot layout: not comparable, not corrupt."""


def read_snapshot(store: ResultsStore, plan_name: str, sid: str) -> dict[str, Any]:
    """A snapshot, checked field by field: every row must be what :func:`metric_rows` writes, so a corrupt or
    hand-edited file can never crash a comparison, the history or the plots."""
    rel = f"{NIGHTLY_DIR}/{plan_name}/{sid}.json"
    raw = store.read_file(rel)
    if raw is None:
        raise MixbenchError(f"no snapshot {rel} in {store.root}.")
    try:
        snap = json.loads(raw)
    except ValueError as exc:  # invalid JSON or UTF-8
        raise CorruptSnapshot(f"snapshot {rel} is not JSON ({exc})") from None
    if not isinstance(snap, dict) or snap.get("format") != FORMAT:
        raise CorruptSnapshot(f"snapshot {rel} is not a mixbench nightly snapshot")
    version = snap.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version < VERSION:
        raise OtherLayout(f"snapshot {rel} has the layout of an older mixbench (version {version}, this one "
                          f"writes {VERSION})")
    if version != VERSION:
        raise CorruptSnapshot(f"snapshot {rel} has version {str(version)[:40]!r}, which no mixbench writes")
    rows = snap.get("rows")
    if not isinstance(rows, list):
        raise CorruptSnapshot(f"snapshot {rel}: 'rows' is not a list")
    for i, row in enumerate(rows):
        problem = _row_problem(row)
        if problem:
            raise CorruptSnapshot(f"snapshot {rel}: row {i + 1} {problem}")
    return snap


def _row_problem(row: Any) -> str:
    """What makes ``row`` unlike a row :func:`metric_rows` writes, or ""."""
    if not isinstance(row, dict):
        return f"is a {type(row).__name__}, not an object"
    for key in ("suite", "metric"):
        if not isinstance(row.get(key), str):
            return f"has no text field '{key}'"
    for key in ("model", "preset", "unit"):
        if row.get(key) is not None and not isinstance(row.get(key), str):
            return f"field '{key}' is not text"
    value = row.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"has a value that is not a number ({str(value)[:40]!r})"
    if not isinstance(row.get("higher_is_better", True), bool):
        return "field 'higher_is_better' is not true or false"
    if not isinstance(row.get("headline", False), bool):
        return "field 'headline' is not true or false"
    interval = row.get("interval")
    if interval is not None:
        if not isinstance(interval, dict):
            return "has an interval that is not an object"
        for side in ("low", "high"):
            bound = interval.get(side)
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
                return f"has an interval whose '{side}' is not a number ({str(bound)[:40]!r})"
    for key in ("code",):
        if row.get(key) is not None and not isinstance(row.get(key), dict):
            return f"field '{key}' is not an object"
    return ""


def quarantine(store: ResultsStore, plan_name: str, sid: str, reason: str) -> str:
    """Move a corrupt snapshot to ``nightly/<plan>/quarantine/`` (out of every comparison and of the history) and
    say so; returns where it went."""
    rel = f"{NIGHTLY_DIR}/{plan_name}/{sid}.json"
    target = f"{NIGHTLY_DIR}/{plan_name}/{QUARANTINE}/{sid}.json"
    store.move_file(rel, target)
    print(f"[mixbench] nightly: {reason}; moved to {target} and left out of the comparison and the history.",
          file=sys.stderr, flush=True)
    return target


def readable_snapshots(store: ResultsStore, plan_name: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """The plan's snapshots of this layout, oldest first, and notes on the others: a corrupt one is quarantined,
    one of an older layout is named and skipped (it stays where it is)."""
    good, notes = [], []
    for sid in list_snapshots(store, plan_name):
        try:
            good.append((sid, read_snapshot(store, plan_name, sid)))
        except OtherLayout as exc:
            notes.append(f"{exc}: not comparable with tonight's")
        except CorruptSnapshot as exc:
            quarantine(store, plan_name, sid, str(exc))
            notes.append(f"{exc}: quarantined")
    return good, notes


def run_nightly(
    plan: Plan,
    store: ResultsStore,
    executor=None,
    device: str = "cpu",
    progress: bool = True,
    plugins: tuple[str, ...] = (),
    publish_dir: Path | None = None,
    now: datetime | None = None,
    skip_gate: bool = False,
    yes: bool = False,
) -> NightlyResult:
    """Run the plan's missing work, snapshot, compare with the previous night, write history and plots."""
    from harness.running.runner import run_requests

    if publish_dir is not None:
        publish_site = _publisher()  # fail before the night's work, not after it
    from harness.running.training_time import check_requests_time
    from harness.running.tune import run_sweep

    reqs = plan.requests(device, progress=progress, plugins=plugins, skip_gate=skip_gate, yes=yes)

    check_requests_time(reqs)  # a rung estimated past the time limit stops the night before any work
    run_sweep(plan, store, device, progress, skip_gate, yes)
    grid = run_requests(reqs, store, executor, keep_going=True)
    result = record_night(plan, store, grid, now)
    if publish_dir is not None:
        publish_site(store, Path(publish_dir))
        result.published = str(publish_dir)
    return result


def record_night(plan: Plan, store: ResultsStore, grid, now: datetime | None = None) -> NightlyResult:
    """Snapshot the plan's metrics after ``grid`` (a GridReport), compare with the last night, write history."""
    rows = metric_rows(store, plan, grid.run_ids)
    earlier = list_snapshots(store, plan.name)
    good, notes = readable_snapshots(store, plan.name)  # the last good night, past any corrupt one
    previous_id, previous_rows = (good[-1][0], good[-1][1]["rows"]) if good else (None, [])
    changes = compare(previous_rows, rows, plan.nightly) if previous_id else []
    sid = snapshot_id(now)
    if earlier and sid <= earlier[-1]:
        raise MixbenchError(f"the clock reads {sid}, not after the last snapshot {earlier[-1]}; check the system time.")
    snapshot = {
        "format": FORMAT,
        "version": VERSION,
        "id": sid,
        "plan": plan.name,
        "plan_source": plan.source,
        "taken_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "grid": {
            "jobs": grid.jobs, "skipped": grid.skipped, "trained": grid.trained, "written": grid.written,
            "wall_s": round(grid.wall_s, 3), "failures": [{"job": f.label, "error": f.error} for f in grid.failures],
        },
        "compared_with": previous_id,
        "changes": [c.to_json() for c in changes if c.status != "unchanged"],
        "rows": rows,
    }
    path = store.write_file(f"{NIGHTLY_DIR}/{plan.name}/{sid}.json", _dumps(snapshot, indent=1) + "\n")
    result = NightlyResult(sid, path, previous_id, changes, grid, notes=notes)
    result.history_files = write_history(store, plan.name)
    return result


def _publisher():
    try:
        from harness.reporting.publish import publish_site
    except ImportError as exc:
        raise MixbenchError(
            f"--publish needs harness.reporting.publish.publish_site, which cannot be imported ({exc}); update mixbench "
            "or run `mixbench nightly` without --publish."
        ) from None
    return publish_site


def history_frame(store: ResultsStore, plan_name: str):
    """Every night's rows of a plan as one long pandas frame (column ``night`` = snapshot id)."""
    import pandas as pd

    frames = []
    for sid, snap in readable_snapshots(store, plan_name)[0]:
        if snap["rows"]:
            frame = pd.DataFrame(snap["rows"])
            frame["night"] = sid
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*KEY_FIELDS, "value", "interval", "headline", "night"])
    return pd.concat(frames, ignore_index=True)


def write_history(store: ResultsStore, plan_name: str) -> list[str]:
    """history.csv / history.md (metric x night) and one plot per headline metric; returns the files."""
    frame = history_frame(store, plan_name)
    base = f"{NIGHTLY_DIR}/{plan_name}"
    if frame.empty:
        return []
    frame = frame.loc[:, [c in KEY_FIELDS or c in ("value", "interval", "headline", "night") for c in frame.columns]]
    for column in ("model", "preset"):
        frame[column] = frame[column].fillna("")
    wide = frame.pivot_table(index=list(KEY_FIELDS), columns="night", values="value", aggfunc="last", dropna=False)
    wide = wide.reindex(columns=sorted(wide.columns))
    wide.columns = [_night_label(c) for c in wide.columns]
    written = [
        store.write_file(f"{base}/history.csv", wide.to_csv()),
        store.write_file(f"{base}/history.md", _history_md(wide)),
    ]
    heads = frame[frame["headline"].astype(bool)]
    for (suite, metric), group in heads.groupby(["suite", "metric"], sort=True):
        png = _plot(group, suite, metric)
        written.append(store.write_file(f"{base}/plots/{_slug(suite)}__{_slug(metric)}.png", png))
    return written


def _night_label(sid: str) -> str:
    return f"{sid[:4]}-{sid[4:6]}-{sid[6:8]} {sid[9:11]}:{sid[11:13]}:{sid[13:15]}"


def _history_md(wide) -> str:
    header = [*KEY_FIELDS, *wide.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, values in wide.iterrows():
        cells = [str(k) for k in key] + ["" if math.isnan(v) else _num(v) for v in values]  # NaN: no value that night
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)).strip("_") or "metric"


def _plot(group, suite: str, metric: str) -> bytes:
    """A metric across nights, one line per (model, preset), the interval as error bars where there is one."""
    from harness.reporting.plotting import figure, png_bytes

    nights = sorted(group["night"].unique())
    x_of = {n: i for i, n in enumerate(nights)}
    fig, axes = figure(7, 4)
    ax = axes[0][0]
    for (model, preset), series in group.groupby(["model", "preset"], sort=True):
        series = series.sort_values("night")
        xs = [x_of[n] for n in series["night"]]
        ys = series["value"].astype(float).to_numpy()
        lo = np.array([_bound(iv, "low") for iv in series["interval"]])
        hi = np.array([_bound(iv, "high") for iv in series["interval"]])
        label = " / ".join(p for p in (str(model), str(preset)) if p)
        has_ci = ~(np.isnan(lo) | np.isnan(hi))
        if has_ci.any():
            err = np.vstack([np.where(has_ci, ys - lo, 0), np.where(has_ci, hi - ys, 0)])
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
        else:
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xticks(range(len(nights)), [_night_label(n) for n in nights], rotation=30, ha="right", fontsize=7)
    ax.set_title(f"{suite} / {metric}")
    ax.set_xlabel("night")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return png_bytes(fig, dpi=100)


def _bound(interval: Any, side: str) -> float:
    if not isinstance(interval, dict) or interval.get(side) is None:
        return math.nan
    return float(interval[side])


def print_result(result: NightlyResult) -> None:
    print(result.render())
    sys.stdout.flush()

