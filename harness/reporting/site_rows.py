"""The site's page of one model (a board row) and of one run (:mod:`harness.reporting.publish`).

Why a module of its own: these pages say where a number came from (identity, cost, loss curves, the provenance of
every run, a run's metrics and its manifest as stored, less local paths), a job apart from ranking models on the
index and the suite pages. Store text reaches them only through :func:`harness.reporting.site_html.esc` and
:func:`harness.reporting.site_html.href`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from harness.reporting.numbers import MISSING, readable, si
from harness.reporting.site_board import seeds_text
from harness.reporting.site_html import esc, href, kv_table, scroll, timings_text
from harness.reporting.site_provenance import provenance_differences, provenance_summary
from harness.reporting.table import Row
from harness.store.results import RunRecord, json_safe

if TYPE_CHECKING:
    from harness.reporting.publish import _Site


def newest_first(runs: list[RunRecord]) -> list[RunRecord]:
    return sorted(runs, key=lambda r: r.manifest.written_at, reverse=True)


def write_row_page(site: _Site, row: Row) -> None:
    runs = newest_first(row.runs)
    summaries = [{k: site.paths.text(v) for k, v in provenance_summary(r).items()} for r in runs]
    fields = [f for f in summaries[0] if any(s[f] for s in summaries)]
    differs = provenance_differences(summaries)
    head = "".join(f'<th class="text">{esc(h)}</th>' for h in ("suite", "seed", "run", "written", *fields))
    lines = []
    for r, s in zip(runs, summaries):
        m = r.manifest
        cells = "".join(
            f'<td class="text wrap{" differs" if f in differs and s[f] else ""}"><div>{esc(s[f])}</div></td>'
            for f in fields
        )
        lines.append(
            f'<tr><td class="text">{esc(m.suite)}</td><td>{esc("" if m.subject.seed is None else m.subject.seed)}</td>'
            f'<td class="text"><a href="{href("..", "runs", f"{r.run_id}.html")}">{esc(r.run_id)}</a></td>'
            f'<td class="text">{esc(m.written_at)}</td>{cells}</tr>'
        )
    subject = runs[0].manifest.subject
    parameters = MISSING if row.parameters is None else f"{readable(row.parameters)} ({si(row.parameters)})"
    parts = [
        f"<h1>{esc(row.label)} / {esc(row.preset)}</h1>",
        kv_table([
            ("mixer", site.paths.text(f"{subject.mixer} ({subject.mixer_source})")),
            ("training seeds", seeds_text(row.seeds)),
            ("parameters", parameters), ("decode state floats", row.state_floats),
            ("training FLOPs", si(row.train_flops, "FLOP", 4) if row.train_flops else row.train_flops),
            ("training tokens/s", row.train_tokens_per_s),
            ("mixer config", site.paths.text(json.dumps(subject.mixer_config, sort_keys=True))),
            ("conformance check", row.gate), ("row (model identity without seed)", row.key),
        ]),
    ]
    curve = _loss_plot(site, row)
    if curve:
        parts.append(f'<h2>Training and validation loss</h2><div class="plots"><img src="{esc(curve)}" '
                     f'alt="training and validation loss of {esc(row.label)}"></div>')
    parts += [
        "<h2>Provenance of every run</h2>",
        f'<p class="note">{"Differs between runs (highlighted): " + esc(", ".join(differs)) if differs else "All runs agree on code, packages, device, kernel and gate."}</p>',
        scroll(f'<table class="sortable prov"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'),
    ]
    site.write_page(f"rows/{site.row_files[row.key]}", f"mixbench · {row.label} / {row.preset}", "\n".join(parts))


def _loss_plot(site: _Site, row: Row) -> str:
    """rows/<row>-loss.png: training loss per step and validation loss per evaluation, one line per seed."""
    curves = {}
    for r in row.runs:
        s = r.manifest.subject
        if s.kind == "model" and s.loss_curve and s.id not in curves:
            curves[s.id] = (s.seed, s.loss_curve)
    if not curves:
        return ""
    from harness.reporting.plotting import figure, save

    fig, axes = figure(7.2, 3.6)  # 720 px at 100 dpi: shown at its own size, its text at 11 px and up
    ax = axes[0][0]
    for seed, curve in sorted(curves.values(), key=lambda c: (c[0] is None, c[0])):
        steps = [p.get("step") for p in curve if p.get("loss") is not None]
        ax.plot(steps, [p["loss"] for p in curve if p.get("loss") is not None], lw=1, label=f"train, seed {seed}")
        val = [(p.get("step"), p["val_loss"]) for p in curve if p.get("val_loss") is not None]
        if val:
            ax.plot([v[0] for v in val], [v[1] for v in val], marker="o", lw=1, label=f"validation, seed {seed}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # off the curves
    name = site.row_files[row.key].removesuffix(".html") + "-loss.png"
    save(fig, site.root / "rows" / name, dpi=100)
    return name


def write_run_page(site: _Site, run: RunRecord) -> None:
    m = run.manifest

    def interval_text(x) -> str:
        iv = x.interval
        if iv is None:
            return ""
        level = "" if iv.level is None else f" {iv.level:.0%}"
        return f"[{readable(iv.low)}, {readable(iv.high)}] {iv.kind}{level}"

    metrics = "".join(
        f'<tr><td class="text">{esc(x.name)}</td><td data-sort="{esc(repr(x.value))}">{esc(readable(x.value))}</td>'
        f'<td class="text">{esc(interval_text(x))}</td><td>{esc(readable(x.n) if x.n is not None else "")}</td>'
        f'<td class="text">{esc(x.unit)}</td><td class="text">{esc(x.role)}</td>'
        f'<td class="text">{"↑" if x.higher_is_better else "↓"}</td><td class="text">{esc(x.unreliable or "")}</td></tr>'
        for x in run.metrics
    )
    head = "".join(f"<th>{h}</th>" if h in ("value", "n") else f'<th class="text">{h}</th>'
                   for h in ("metric", "value", "interval", "n", "unit", "role", "better", "unreliable because"))
    # the manifest as stored, less the local paths in it (a checkpoint's folder, a provenance entry)
    manifest_text = json.dumps(site.paths.json(json_safe(m.to_json())), ensure_ascii=False, indent=2)
    (site.root / "runs" / f"{run.run_id}.json").write_text(manifest_text + "\n", encoding="utf-8")
    parts = [
        f"<h1>Run {esc(run.run_id)}</h1>",
        kv_table([("suite", m.suite), ("config", site.paths.text(m.config_label)), ("kind", m.kind),
                   ("model", m.subject.label),
                   ("preset", m.subject.preset or "—"), ("seed", m.subject.seed),
                   ("conformance check", m.gate.status),
                   ("written", m.written_at), *([("timings", timings_text(m.timings))] if m.timings else [])]),
        "<h2>Metrics</h2>",
        scroll(f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{metrics}</tbody></table>'),
    ]
    if site.plots.get(run.run_id):
        parts.append("<h2>Plots</h2>" + site.plots_html(run, 1))
    parts.append(
        f'<h2>Manifest</h2><p><a href="{href(f"{run.run_id}.json")}" download>manifest JSON</a></p>'
        f"<details><summary>show</summary><div class=\"gen\">{esc(manifest_text)}</div></details>"
    )
    site.write_page(f"runs/{run.run_id}.html", f"mixbench · run {run.run_id}", "\n".join(parts))
