"""Unit cards and intervention tables as one self-contained HTML page.

Every string that comes from the model, the corpus or the config goes through ``html.escape(..., quote=True)``
(model and corpus text is untrusted); the page has no script and no external resource.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from suites.interpretability.interventions import InterventionRow
from suites.interpretability.profiles import UnitProfile

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
.cards{display:flex;flex-wrap:wrap;gap:.8em}
.card{border:1px solid #ccc;border-radius:6px;padding:.6em .8em;width:26em;font-size:.85em}
.card.dead{opacity:.5}
.card h3{margin:.1em 0 .3em 0;font-size:1.05em}
.meta{color:#555}
.ctx{font-family:ui-monospace,monospace;white-space:pre-wrap;margin:.15em 0;border-bottom:1px dotted #ddd}
mark{background:#ffe28a}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _num(v: object, fmt: str = ".3g") -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "—" if isinstance(v, float) and not math.isfinite(v) else format(v, fmt)
    return _e(v)


def card(p: UnitProfile) -> str:
    attrs = " · ".join(f"{_e(k)} {_num(v)}" for k, v in sorted(p.attrs.items()))
    scores = " · ".join(f"{_e(k)} {_num(v)}" for k, v in sorted(p.scores.items()))
    tokens = ", ".join(f"<code>{_e(repr(t))}</code> {s:.0%}" for t, s in p.top_tokens[:8])
    contexts = "".join(
        f'<div class="ctx">{_e(c.left)}<mark>{_e(c.token)}</mark>{_e(c.right)} '
        f'<span class="meta">({_num(c.activation)})</span></div>'
        for c in p.contexts
    )
    dead = " dead" if p.dead else ""
    return (
        f'<div class="card{dead}"><h3>{_e(p.label)} <span class="meta">{_e(p.unit_kind)}{" · dead" if p.dead else ""}'
        f"</span></h3>"
        f'<div class="meta">{attrs}</div><div class="meta">{scores} · token entropy {_num(p.token_entropy)} bits · '
        f"max {_num(p.max_activation)}</div><div>top tokens: {tokens}</div>{contexts}</div>"
    )


def intervention_table(rows: list[InterventionRow]) -> str:
    head = ("mode", "role", "unit", "chosen for", "how", "target", "prompts", "Δprob mean", "Δprob max", "ΔPPL",
            "ΔPPL max (window)", "ΔPPL mean (window)")
    body = "".join(
        "<tr>" + "".join(f"<td>{x}</td>" for x in (
            _e(r.mode), _e(r.role), _e(r.label), _e(repr(r.word)), _e(r.how), _e(repr(r.target_word)),
            _num(r.n_prompts, "d"), _pct(r.dprob_mean), _pct(r.dprob_max), _pct(r.dppl), _pct(r.dppl_max),
            _pct(r.dppl_mean),
        )) + "</tr>"
        for r in rows
    )
    return "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + f"</tr>{body}</table>"


def _pct(v: float) -> str:
    return "—" if not math.isfinite(v) else f"{100 * v:+.2f}%"


def write_page(path: Path, title: str, sections: dict[str, list[UnitProfile]], interventions: list[InterventionRow],
               notes: list[str]) -> Path:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>"]
    parts += [f"<p class='meta'>{_e(n)}</p>" for n in notes]
    if interventions:
        parts.append("<h2>Interventions</h2>" + intervention_table(interventions))
    for name, profiles in sections.items():
        parts.append(f"<h2>{_e(name)} ({len(profiles)} units)</h2><div class='cards'>")
        parts.extend(card(p) for p in profiles)
        parts.append("</div>")
    parts.append("</body></html>")
    path.write_text("".join(parts), encoding="utf-8")
    return path
