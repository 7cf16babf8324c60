"""The long-context suite's section of the published site (:meth:`suites.long_context.LongContext.site_section`):
the loss-by-position table (each model's NLL per bucket, then its paired difference from the context-free control
on the documents both scored) and each model's retrieval grid (accuracy per task and length by depth, zero-shot and
fine-tuned). Built only from the site kit's helpers, which escape every value."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import RunRecord
    from harness.suite import Metric, SiteKit

PHASES = {"zs": "zero-shot", "ft": "fine-tuned"}


def _cell(m: "Metric | None") -> str:
    if m is None:
        return ""
    if not math.isfinite(m.value):
        return "not measured" if (m.unreliable or "").startswith("not measured") else "n/a"
    text = f"{m.value:.3f}"
    if m.interval is not None and m.interval.finite:
        text += f" [{m.interval.low:.3f}, {m.interval.high:.3f}]"
    return text + (" *" if m.unreliable else "")


def _mean(m: "Metric", ids: set[str]) -> float:
    pairs = [(v, w) for i, v, w in zip(m.items.ids, m.items.values, m.items.weights or [1.0] * len(m.items))
             if i in ids]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else math.nan


def _difference(m: "Metric | None", ref: "Metric | None") -> str:
    """The model's token-weighted NLL minus the control's, on the documents both have in this bucket."""
    if m is None or ref is None or m.items is None or ref.items is None:
        return ""
    shared = set(m.items.ids) & set(ref.items.ids)
    if not shared:
        return ""
    return f"{_mean(m, shared) - _mean(ref, shared):+.3f}"


def _subject(run: "RunRecord", name: str) -> Any:
    return getattr(run.manifest.subject, name, None)


def site_section(runs: "list[RunRecord]", kit: "SiteKit") -> str:
    newest = kit.newest_per_model(runs)
    if not newest:
        return ""
    names = [m.name for m in newest[0].metrics if m.name.startswith("nll_pos_")]
    parts = ["<h2>Loss by position</h2>"]
    readouts = ("context_used", "extrapolation", "far_context_gain")
    header = ("model", *(n.removeprefix("nll_pos_") for n in names), *(r.replace("_", " ") for r in readouts))
    rows = [(_plain_label(run), *(_cell(run.metric(n)) for n in (*names, *readouts))) for run in newest]
    parts.append(kit.table(header, rows, "NLL per token (nats) of targets at these window positions, 95% bootstrap "
                                         "interval over documents; * marked unreliable (scored past training by "
                                         "opt-in, or a lower bound); not measured: the model may not read that far"))
    reference = next((r for r in newest if _subject(r, "context_free")), None)
    if reference is not None:
        diff_rows = [(_plain_label(run), *(_difference(run.metric(n), reference.metric(n)) for n in names))
                     for run in newest if run is not reference]
        parts.append(kit.table(("model", *(n.removeprefix("nll_pos_") for n in names)), diff_rows,
                               f"difference from the context-free control ({_plain_label(reference)}) per bucket, "
                               "paired on the documents both scored (negative: lower loss than the control)"))
    grids = []
    for run in newest:
        info = (run.manifest.suite_info or {}).get("retrieval") or {}
        depths = info.get("depths") or []
        for phase, cells in (info.get("cells") or {}).items():
            table: dict[tuple[str, int], dict[str, str]] = {}
            for c in cells:
                row = table.setdefault((str(c.get("task")), int(c.get("length") or 0)), {})
                acc = c.get("accuracy")
                row["-" if c.get("depth") is None else f"{c['depth']:g}"] = (
                    "not measured" if acc is None else f"{acc:.2f} ({c.get('n')})")
            columns = [f"{d:g}" for d in depths] + (["-"] if any("-" in r for r in table.values()) else [])
            body = [(task, length, *(r.get(d, "") for d in columns)) for (task, length), r in table.items()]
            grids.append(f"<h3>{kit.model_label(run)}: {kit.escape(PHASES.get(phase, phase))}</h3>")
            grids.append(kit.table(("task", "length", *(f"depth {d}" for d in columns)), body,
                                   f"accuracy (examples) by log-likelihood ranking over {info.get('k')} candidates "
                                   f"(chance {1 / max(1, int(info.get('k') or 1)):.2f}); depth - : no depth"))
    if grids:
        parts.append("<h2>Retrieval</h2>")
        parts += grids
    parts += _decode_cost(newest, kit)
    return "\n".join(parts)


def _decode_cost(newest: "list[RunRecord]", kit: "SiteKit") -> list[str]:
    """What reading that far costs: each model's decode state after each length the runs read (the mixer's own
    count), and a link to the throughput suite's page for the time per token, which is measured there, not here."""
    states = [(run, _decode_state(run)) for run in newest]
    lengths = sorted({int(n) for _, s in states for n in s})
    if not lengths:
        return []
    rows = [(_plain_label(run), *(f"{s[str(n)]:,}" if str(n) in s else "" for n in lengths)) for run, s in states]
    return ["<h2>Decode cost at these lengths</h2>",
            kit.table(("model", *(f"after {n:,}" for n in lengths)), rows,
                      "floats of decode state per sequence after this many tokens, as each mixer counts it"),
            f"<p>Decode time per token at these lengths is measured by the "
            f"{kit.suite_link('throughput', 'throughput suite')}, beside attention and the context-free control.</p>"]


def _decode_state(run: "RunRecord") -> dict[str, int]:
    """The run's recorded decode states, length -> floats; entries a hand-edited store holds in another form are
    left out (a store is untrusted input: the page must not break on it)."""
    found = (run.manifest.suite_info or {}).get("decode_state")
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items()
            if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool)}


def _plain_label(run: "RunRecord") -> str:
    """The board's label of the model as plain text (:meth:`SiteKit.model_label` is escaped HTML, and table cells
    are escaped by the kit)."""
    s = run.manifest.subject
    return f"{s.label} / {s.preset}" if s.preset else str(s.label)
