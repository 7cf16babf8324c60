"""The interpretability suite's section of the published site (:meth:`suites.interpretability.Interpretability.site_section`):
per model, a table of its own units (top tokens, entropy, coherence, half-life where the unit has one) and the
targeted interventions with their controls; the HTML unit cards are shown by the site as sandboxed plots. Built
only from the site kit's helpers, which escape every value (top tokens and contexts are model text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import RunRecord
    from harness.suite import SiteKit

UNITS_SHOWN = 24


def _num(v: Any) -> str:
    return "" if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v:.3g}"


def site_section(runs: "list[RunRecord]", kit: "SiteKit") -> str:
    parts = []
    for run in kit.newest_per_model(runs):
        units = [s for s in run.samples if s.get("kind") == "unit" and s.get("unit_set") == "units"]
        interventions = [s for s in run.samples if s.get("kind") == "intervention"]
        if not units and not interventions:
            continue
        parts.append(f"<h3>{kit.model_label(run)} ({kit.run_link(run, 'run')})</h3>")
        if units:
            rows = [
                (u.get("label"), ", ".join(str(t[0]) for t in (u.get("top_tokens") or [])[:6]),
                 _num(u.get("token_entropy")), _num((u.get("scores") or {}).get("coherence")),
                 _num((u.get("attrs") or {}).get("half_life")), "dead" if u.get("dead") else "")
                for u in units[:UNITS_SHOWN]
            ]
            parts.append(kit.table(("unit", "top tokens", "token entropy (bits)", "coherence", "half-life", ""), rows,
                                   f"{min(len(units), UNITS_SHOWN)} of {len(units)} units"))
        if interventions:
            keys = [k for k in interventions[0] if k != "kind"]
            parts.append(kit.table(keys, [[_num(s.get(k)) or s.get(k) for k in keys] for s in interventions],
                                   "targeted interventions and their controls"))
    return ("<h2>Units and interventions</h2>" + "\n".join(parts)) if parts else ""
