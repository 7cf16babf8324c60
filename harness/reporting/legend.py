"""The board's notes: what every mark and column means, which columns vote and why the others do not, and the
rank-stability lines (docs/ARCHITECTURE.md, "The board"). Every rendering of a board (text, JSON, the site, a model
card) prints these."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.reporting.context_use import detail_lines
from harness.reporting.preamble import UNTUNED_MARK
from harness.reporting.table import Column

if TYPE_CHECKING:
    from harness.reporting.board import Board

UNRELIABLE_MARK = "†"
OUTSIDE_MARK = "°"
CONTROL_MARK = "‡"  # a mixer cell not better than the reference control (docs/controls.md)
STABILITY_MARK = "~"  # a column whose ordering changed between half the largest budget and it (docs/rank_stability.md)


def state_contexts(board: Board) -> list[int]:
    """The training contexts the rows' decode states were counted at (``Subject.state_floats``)."""
    found = set()
    for row in board.table.rows:
        for run in row.runs:
            backbone = run.manifest.subject.backbone or {}
            if isinstance(backbone.get("context"), int):
                found.add(backbone["context"])
    return sorted(found)


def legend(board: Board, columns: list[Column]) -> list[str]:
    """What every mark means, which columns vote and why the others do not, and what rows lack."""
    cfg = board.config
    lines = [
        f"rank: Borda rank within the preset over the voting columns, each suite weighing the same, on tie groups (a "
        "point per row in a lower group, half per other row of its own; rows not better than the null share the "
        "lowest group; a column whose rows all tie gives none); in brackets its "
        f"{cfg.rank_level:.0%} bootstrap interval (columns, shared items and seed noise resampled); '=' marks a row "
        "whose rank interval overlaps another's (tied); '–' a row that lacks a voting suite.",
        f"letters: tie groups of a voting column; 'a' (bold) holds the best row and every row a paired test on "
        f"shared items cannot tell from it (Holm, family-wise alpha {cfg.alpha:g}), the training-seed spread "
        "counted (docs/protocol.md); then 'b', ...",
        f"values: mean over seeds with its interval (one seed: the run's own; ± is half its width, a skewed interval "
        f"is shown by its bounds [low,high]); "
        f"{UNRELIABLE_MARK} unreliable (does not vote), {OUTSIDE_MARK} the point lies outside its interval, "
        "n/a does not exist, — missing.",
        "check: the conformance gate's verdict (`mixbench check`) for the row's mixer and config: ok passed, skip "
        "scored with --skip-gate, model an external model that passed the model-level checks (causal, "
        "deterministic, batch independent); not the backbone's residual gates, which the first lines name.",
        f"{UNTUNED_MARK} after a model: trained without its tuned recipe (no recipe for it at its preset, or its "
        "values overridden); its learning rate was not chosen on validation for it (docs/protocol.md).",
        "state: floats of decode state per sequence after the model's training context ("
        + (", ".join(f"T={t}" for t in state_contexts(board)) or "T unknown") + "), as the mixer counts it.",
        "seeds: how many seeds the row averages, their ids in brackets (full views).",
    ]
    if board.has_controls:
        refs = ", ".join(board.reference_controls) or "the controls"
        lines.append(
            "control: a control mixer (docs/controls.md), trained and scored like the others and never ranked; a column "
            f"whose best mixer is not better than every control does not vote; {CONTROL_MARK} a mixer cell not better "
            f"than its null: {refs} (paired test on shared items with the seed spread, Holm over the column's "
            f"mixers, alpha {cfg.alpha:g}), or, in a column controls cannot score, its own untrained model; such "
            "a cell takes no Borda points; `--all` "
            "and the JSON give each score cell's difference from the controls with its interval (on the items' "
            "scale where items exist: NLL per token for perplexity).")
    else:
        lines.append("no control rows on this board: nothing shows whether a column measures mixing at all "
                     "(grids include the controls unless told not to; docs/controls.md).")
    if any(row.external for row in board.table.rows):
        lines.append(
            "external: a transformers model mixbench did not train, scored with its own tokenizer (docs/huggingface.md); "
            "never ranked, its per-token perplexities are marked unreliable (unless it reads with mixbench's own "
            "tokenizer: a re-imported export); compare it with the rows on bpb (`mixbench compare` pairs them on "
            "the same documents).")
    votes = [v.column.name for v in board.verdicts.values() if v.votes]
    lines.append("voting columns: " + (", ".join(votes) if votes else "none"))
    unknown = sorted({name for (_, name), n in board.seed_noise.items() if n is None and name in votes})
    if unknown:
        lines.append("seed spread unknown (one seed per row and none measured for the preset): "
                     f"{', '.join(unknown)}; their ties and vetoes count item noise only")
    for c in columns:
        v = board.verdicts.get(c.name)
        if v is not None and not v.votes and c.role == "score":
            lines.append(f"{c.name} does not vote: {v.reason}")
    for row in board.table.rows:
        if row.key in board.unranked:
            lines.append(f"{row.label} / {row.preset} is not ranked: it {board.unranked[row.key]}")
    lines += stability_lines(board, columns)
    if any(c.positions is not None for c in columns):  # a view that shows the position columns: their record
        lines += detail_lines(board.context)
    lines += board.table.notes
    return lines


def stability_lines(board: Board, columns: list[Column]) -> list[str]:
    """The rank-stability notes of ``columns`` (docs/rank_stability.md): what the mark means, once, then one line
    per column and budget series; none for a board whose settings each have one token budget."""
    names = {c.name for c in columns}
    found = [s for s in board.stability if s.column in names and s.status != "only one budget"]
    several = len({s.series for s in found}) > 1
    lines = []
    if any(s.changed for s in found):
        lines.append(f"{STABILITY_MARK}: a column whose ordering is still changing at a setting's largest token "
                     "budget: a pair of models swapped places since the largest budget at most half of it (two "
                     "models in one tie group at both budgets do not count; docs/rank_stability.md).")
    for s in found:
        where = f" ({s.series_label})" if several else ""
        lead = f"{STABILITY_MARK} {s.column}" if s.changed else f"rank stability of {s.column}"
        lines.append(f"{lead}{where}: {s.sentence}.")
    return lines
