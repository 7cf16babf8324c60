"""The robustness suite's section of the published site (:meth:`suites.robustness.Robustness.site_section`):
per model, the duplicate counts of each slice and a few example pairs with their edits and scores. Built only
from the site kit's helpers, which escape every value (pair texts come from files and models)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import RunRecord
    from harness.suite import SiteKit

PAIRS_PER_SLICE = 3
SCORES = ("jsd_final", "top1", "spearman", "dppl")


def _num(v: Any) -> str:
    return "n/a" if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v:.4g}"


def _edit(edit: Any) -> str:
    if isinstance(edit, dict):
        return ", ".join(f"{k}={v}" for k, v in edit.items())
    return str(edit)


def site_section(runs: "list[RunRecord]", kit: "SiteKit") -> str:
    parts = []
    for run in kit.newest_per_model(runs):
        duplicates = ((run.manifest.suite_info or {}).get("pairs") or {}).get("duplicates") or {}
        counts = [(name, c.get("lines"), c.get("unique"), _num(c.get("duplicate_rate")))
                  for name, c in (duplicates.get("per_slice") or {}).items() if isinstance(c, dict)]
        by_slice: dict[str, list[dict]] = defaultdict(list)
        for s in run.samples:
            by_slice[str(s.get("slice"))].append(s)
        if not counts and not by_slice:
            continue
        parts.append(f"<h3>{kit.model_label(run)} ({kit.run_link(run, 'run')})</h3>")
        if counts:
            parts.append(kit.table(("slice", "pair lines", "unique pairs", "duplicate rate"), counts,
                                   "intervals resample unique pairs (a duplicated pair counts once)"))
        rows = []
        for name, samples in by_slice.items():
            for s in samples[:PAIRS_PER_SLICE]:
                edits = "; ".join(_edit(e) for e in s.get("edits") or [])
                scores = " · ".join(f"{k} {_num(s.get(k))}" for k in SCORES if k in s)
                rows.append((f"{name} ({s.get('kind', '')})", s.get("original", ""), s.get("perturbed", ""), edits,
                             scores))
        if rows:
            parts.append(kit.table(("slice", "original", "perturbed", "edits", "scores"), rows))
    return ("<h2>Example pairs</h2>" + "\n".join(parts)) if parts else ""
