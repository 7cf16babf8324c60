"""The synthetic suite's section of the published site (:meth:`suites.synthetic.Synthetic.site_section`).

Runs are grouped by suite config (only runs of one config saw the same generated examples); within a group the
newest run of each mixer and mixer config is shown. Per group: the accuracy of every mixer on every setting
with its Wilson interval, chance level and decode state size, and whether the mixer is on that setting's
accuracy-vs-state Pareto front (among the mixers above chance, no other is at least as accurate with no more
state and better on one);
the MAD score per task; the length-extrapolation slice; and each run's accuracy-vs-state plot. Built only from
the site kit's helpers, which escape every value.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from harness.kit import pareto_front

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import RunRecord
    from harness.suite import Metric, SiteKit

PLOT_NAME = "synthetic_accuracy_vs_state.png"


def _fmt(m: "Metric | None", digits: int = 3) -> str:
    if m is None or not math.isfinite(m.value):
        return "n/a"
    text = f"{m.value:.{digits}f}"
    if m.interval is not None and m.interval.finite:
        text += f" [{m.interval.low:.{digits}f}, {m.interval.high:.{digits}f}]"
    return text


def _manifest(run: "RunRecord", name: str, default: Any = None) -> Any:
    """A manifest field, whether the record holds a typed manifest or its JSON form."""
    m = run.manifest
    return m.get(name, default) if isinstance(m, dict) else getattr(m, name, default)


def _info(run: "RunRecord") -> dict[str, Any]:
    """What this suite wrote about the run (``SuiteResult.info``): the mixer, its config, the settings."""
    return _manifest(run, "suite_info") or {}


def _mixer_key(run: "RunRecord") -> tuple[str, str]:
    info = _info(run)
    return str(info.get("mixer") or "?"), json.dumps(info.get("mixer_config") or {}, sort_keys=True)


def _mixer_label(key: tuple[str, str]) -> str:
    mixer, config = key
    return mixer if config in ("{}", "null") else f"{mixer} {config}"


def _above_chance(m: "Metric") -> bool:
    """Whether an accuracy beats guessing: its interval's lower bound above the chance level. A mixer at chance
    learned nothing, and however small its state it is on no front."""
    if not math.isfinite(m.value):
        return False
    low = m.value if m.interval is None or not m.interval.finite else m.interval.low
    return m.chance is None or low > m.chance


def site_section(runs: list["RunRecord"], kit: "SiteKit") -> str:
    groups: dict[str, list["RunRecord"]] = defaultdict(list)
    for run in runs:
        groups[json.dumps(_info(run).get("config") or {}, sort_keys=True)].append(run)
    parts = []
    for n, (config, members) in enumerate(sorted(groups.items()), 1):
        newest: dict[tuple[str, str], "RunRecord"] = {}
        for run in sorted(members, key=lambda r: str(_manifest(r, "written_at", ""))):
            newest[_mixer_key(run)] = run
        if newest:
            parts.append(_group(n, config, newest, kit))
    if not parts:
        return ""
    return "\n".join([f"<h2>{kit.escape('Synthetic tasks: accuracy against decode state')}</h2>", *parts])


def _group(n: int, config: str, newest: dict[tuple[str, str], "RunRecord"], kit: "SiteKit") -> str:
    e = kit.escape
    by_name = {key: {m.name: m for m in run.metrics} for key, run in newest.items()}
    settings: list[dict[str, Any]] = []  # task/label in run order, across runs
    seen = set()
    for run in newest.values():
        for s in _info(run).get("settings", []):
            if (s.get("task"), s.get("label")) not in seen:
                seen.add((s.get("task"), s.get("label")))
                settings.append(s)
    walls = {key: {(s.get("task"), s.get("label")): s.get("wall_s") for s in _info(run).get("settings", [])}
             for key, run in newest.items()}

    rows = []
    for s in settings:
        prefix = f"{s.get('task')}/{s.get('label')}"
        points = {}
        for key, metrics in by_name.items():
            acc, state = metrics.get(f"{prefix}/acc"), metrics.get(f"{prefix}/state_floats")
            if acc is not None and state is not None and _above_chance(acc):
                points[key] = (acc.value, state.value)
        front = pareto_front(points, x_higher=True, y_higher=False)  # (accuracy up, state down)
        for key, metrics in sorted(by_name.items()):
            acc = metrics.get(f"{prefix}/acc")
            if acc is None:
                continue
            state = metrics.get(f"{prefix}/state_floats")
            wall = walls[key].get((s.get("task"), s.get("label")))
            rows.append((
                s.get("task"), s.get("label"), _mixer_label(key), _fmt(acc),
                "n/a" if acc.chance is None else f"{acc.chance:.4f}",
                "n/a" if state is None else f"{state.value:,.0f}",
                "yes" if key in front else "", "n/a" if wall is None else f"{wall:.0f}",
            ))
    out = [f"<h3>{e(f'Config {n}')}</h3>", f"<p>{e(config)}</p>"]
    out.append(kit.table(
        ("task", "setting", "mixer", "test accuracy [95% Wilson]", "chance", "decode state (floats)",
         "Pareto front", "wall s"),
        rows, caption="Accuracy at target positions; the Pareto front is per setting, accuracy against state, "
                      "among mixers whose interval is above chance.",
    ))

    tasks = list(dict.fromkeys(str(s.get("task")) for s in settings))
    avg_rows = []
    for key, metrics in sorted(by_name.items()):
        cells = []
        for task in tasks:
            m = next((v for name, v in metrics.items()
                      if name.startswith(f"{task}/avg") and name.count("/") == 1), None)
            cells.append(_fmt(m))
        avg_rows.append((_mixer_label(key), *cells))
    out.append(kit.table(("mixer", *tasks), avg_rows,
                         caption="MAD score: mean accuracy over each task's settings (normal interval)."))

    extrap_rows = []
    for key, metrics in sorted(by_name.items()):
        for name, m in metrics.items():
            if "/extrap_x" in name:
                extrap_rows.append((_mixer_label(key), name.removesuffix("_acc"), _fmt(m)))
    if extrap_rows:
        out.append(kit.table(("mixer", "slice", "test accuracy [95% Wilson]"), extrap_rows,
                             caption="Length extrapolation: trained at one length, tested at longer ones "
                                     "(mixers that declare length extrapolation)."))
    for key, run in sorted(newest.items()):
        for rel in run.plots:
            if rel.endswith(PLOT_NAME) or PLOT_NAME.rsplit(".", 1)[0] in rel:
                out.append(kit.plot(run, rel, caption=f"{_mixer_label(key)}: accuracy against decode state"))
    return "\n".join(out)
