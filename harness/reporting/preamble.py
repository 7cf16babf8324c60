"""The board's first lines: what a reader must know before reading a rank (docs/protocol.md).

* whether anything on the board tells the mixers apart (:meth:`harness.reporting.board.Board.headline`);
* per preset, the budget: training tokens per model, tokens per parameter, the parameter counts and whether they
  are matched, and how many seeds each row averages (one seed says that differences smaller than the seed spread
  are not claimed, and what that spread is);
* the backbone rule every row shares (residual gates, who initialised the output projections) and which rows were
  trained without their tuned recipe;
* whether any mixer uses context beyond the first position buckets (:mod:`harness.reporting.context_use`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.model.matching import MATCH_TOLERANCE
from harness.model.recipes import OVERRIDDEN, UNTUNED
from harness.reporting.context_use import context_lines

if TYPE_CHECKING:
    from harness.reporting.board import Board

#: the mark after the label of a row trained without its tuned recipe (untuned or overridden)
UNTUNED_MARK = "*"


def preamble(board: "Board") -> list[str]:
    """The board's first lines (see the module docstring), in order."""
    from harness.reporting.render import si

    lines = []
    first = board.headline()
    if first:
        lines.append(first)
    table = board.table
    presets = sorted({r.preset for r in table.rows if not r.external})
    for preset in presets:
        rows = [r for r in table.rows if r.preset == preset and not r.external]
        where = f"preset {preset}" if len(presets) > 1 or preset not in ("", "—") else "this board"
        parts = []
        budgets = sorted({r.budget for r in rows if r.budget})
        params = [r.parameters for r in rows if r.parameters]
        if budgets:
            parts.append(f"{'/'.join(si(b) for b in budgets)} training tokens per model")
            if params:
                ratios = [b / p for b in budgets for p in params]
                low, high = _ratio(min(ratios)), _ratio(max(ratios))
                parts.append(f"{low}{'' if low == high else f'-{high}'} tokens per parameter")
        if params:
            low, high = si(min(params)), si(max(params))
            parts.append(f"{low}-{high} parameters" if low != high else f"{low} parameters")
        matched = [r.non_embedding_parameters for r in rows if r.non_embedding_parameters]
        if len(matched) >= 2:
            spread = (max(matched) - min(matched)) / min(matched)
            parts.append(f"non-embedding parameters within {max(spread, 0.001):.1%} of each other (matched)"
                         if spread <= MATCH_TOLERANCE
                         else f"sizes NOT matched: non-embedding parameters differ by up to {spread:.0%}")
        seeds = sorted({len(r.seeds) for r in rows if r.seeds})
        parts.insert(0, _seed_text(board, preset, seeds))
        lines.append(f"{where}: " + "; ".join(parts))
        lines.append(_backbone_text(rows))
    lines += context_lines(board.context)
    return lines


def _ratio(x: float) -> str:
    """Two significant digits below 10 (0.39), whole numbers above (330)."""
    return f"{x:.2g}" if x < 10 else f"{x:,.0f}"


def _seed_text(board: "Board", preset: str, seeds: list[int]) -> str:
    if not seeds:
        return "seeds unknown"
    if seeds == [1]:
        noise = next((n for (p, name), n in board.seed_noise.items()
                      if p == preset and n is not None and (v := board.verdicts.get(name)) is not None
                      and v.column.role == "score"), None)
        spread = "" if noise is None else (f" (seed SD up to {noise.sd:.3g} on the items' scale, from {noise.source})")
        return ("ONE training seed per row: differences smaller than the seed spread are not claimed" + spread
                + "; columns without a measured spread count item noise only (3 seeds: `make reference-board`)")
    text = f"{'/'.join(map(str, seeds))} training seeds per row (ties and vetoes count the spread between them)"
    if 1 in seeds:
        text += "; rows of ONE seed claim no difference smaller than the seed spread"
    return text


def _backbone_text(rows: list) -> str:
    gates = sorted({r.residual_gates for r in rows if r.residual_gates})
    gate_text = {"none": "no residual gates", "mixer": "a learnable gate on the mixer branch only",
                 "all": "learnable gates on every residual branch (mixer and MLP)"}
    parts = ["backbone: " + (", ".join(gate_text.get(g, g) for g in gates) or "residual gates unknown")]
    own = sorted(r.label for r in rows if r.output_init == "mixer")
    parts.append("every mixer's output projection initialised by the backbone, N(0, 0.02/sqrt(2L))" if not own else
                 f"output projections initialised by the backbone except {', '.join(own)} (its own)")
    untuned = sorted(r.label for r in rows if r.recipe in (UNTUNED, OVERRIDDEN))
    tuned = [r for r in rows if r.recipe == "tuned"]
    if tuned and not untuned:
        parts.append("every row at its learning rate tuned on validation (`mixbench tune`)")
    elif untuned:
        parts.append(f"{UNTUNED_MARK} trained without a tuned recipe (untuned, or its values overridden): "
                     f"{', '.join(untuned)}")
    return "; ".join(parts)
