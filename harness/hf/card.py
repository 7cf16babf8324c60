"""The model card (``README.md``) of an exported folder: what the model is, its board row, how to load it.

The card's results are the board's (docs/DESIGN.md §6): the board of the whole results store is built as
``mixbench leaderboard`` builds it, with every preset's controls, and the card copies this model's row from it (the
row whose runs scored exactly these weights): each cell's value and interval, whether its column votes at the
model's preset and, when not, the board's own reason, the cell's marks (‡ not better than its null or the reference
control, † unreliable), the rank with its interval or why there is none, and the board's first lines. Nothing is
judged here, so the card cannot say what the board does not. Without a store it says that no results were
attached. Text from the store (labels, reasons) is escaped for Markdown, as the board's own Markdown is.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from harness.model.checkpoint import Checkpoint


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.4g}"


def _interval(metric) -> str:
    """A metric's or a board cell's interval with its kind and level."""
    iv = metric.interval
    if iv is None:
        return "—"
    level = f" {iv.level:.0%}" if iv.level is not None else ""
    return f"[{_fmt(iv.low)}, {_fmt(iv.high)}] {iv.kind}{level}"


def _md(text: Any, cell: bool = True) -> str:
    from harness.reporting.render import escape_md

    return escape_md(str(text), cell)


def trained_by(ckpt: Checkpoint) -> str:
    """What the checkpoint records of its training. No checkpoint records the command that trained it (``train``,
    ``run``, plans, the quickstart and ``tune`` train through one function and write the same metadata), so none
    is named."""
    meta = ckpt.meta
    prov = meta.get("provenance") or {}
    if not prov:
        return ("written by mixbench; its metadata records no training (no mixbench version, revision or device), "
                "nor which command wrote it")
    git = prov.get("git") or {}
    revision = (f" at revision `{git['commit'][:12]}`" + (" (uncommitted changes)" if git.get("dirty") else "")
                if git.get("commit") else " (no git revision recorded)")
    where = f" on {meta['device']}" if meta.get("device") else ""
    if (meta.get("world_size") or 1) > 1:
        where += f" ({meta['world_size']} processes)"
    tokens = f", {meta['tokens_seen']:,} tokens" if isinstance(meta.get("tokens_seen"), int) else ""
    return (f"trained by mixbench {prov.get('mixbench', '(version unrecorded)')}{revision}{where}: {ckpt.step} steps"
            f"{tokens} (the checkpoint's metadata, which does not record the command that started the training)")


def runs_table(runs: list) -> list[str]:
    """Without the store's board: the runs' own numbers, and no claim on what votes (only the board decides)."""
    if not runs:
        return ["No results were attached to this export (pass `--results STORE` to `mixbench export` to carry the "
                "model's board row)."]
    lines = ["| suite | metric | value | interval | n | conformance check | run |",
             "|---|---|---:|---|---:|---|---|"]
    for run in runs:
        m = run.manifest
        headline = set(m.headline)
        for metric in run.metrics:
            if headline and metric.name not in headline:
                continue
            lines.append(f"| {_md(m.suite)} | {_md(metric.name)} | {_fmt(metric.value)} | {_md(_interval(metric))} | "
                         f"{'' if metric.n is None else metric.n} | {_md(m.gate.status)} (v{m.gate.version}) | "
                         f"`{run.run_id[:12]}` |")
    return lines + ["", "These are the runs' own numbers. Which columns vote, the marks and the rank come from the "
                        "board of the whole store (`mixbench leaderboard --all`), which this card was written without."]


def _preset_board(board, preset: str):
    """The board of ``preset`` alone: on a board of several presets a column votes when it votes at any of them,
    and its reason is the first preset's; each preset's votes are computed apart (the same rows, controls and
    seed noise), so this board's verdicts are the model's preset's."""
    from harness.reporting.board import build_board

    if all(r.preset == preset for r in board.table.rows if not r.external):
        return board
    rows = [r for r in board.table.rows if r.preset == preset]
    return build_board(dataclasses.replace(board.table, rows=rows), board.config)


def _model_row(board, ckpt: Checkpoint):
    """The board row whose runs scored these weights, else the row of this model identity (another training of the
    same configuration, code and data: said so); None when the board has neither."""
    weights = ckpt.meta.get("weights_sha256")
    for row in board.table.rows:
        if weights and any(r.manifest.subject.weights_sha256 == weights for r in row.runs):
            return row, ""
    identity = (ckpt.meta.get("model_identity") or {}).get("id")
    for row in board.table.rows:
        if identity and any(r.manifest.subject.id == identity for r in row.runs):
            return row, (" No run on the board scored these exact weights: this is the row of the same model "
                         "identity (configuration, code and data), scored on another training of it.")
    return None, ""


def _no_row(board, ckpt: Checkpoint, runs: list, root: str) -> str:
    weights = ckpt.meta.get("weights_sha256")
    if any(any(r.manifest.subject.weights_sha256 == weights for r in row.runs) for row in board.table.earlier):
        return (f"The board of `{root}` has no row for this model: it was trained at a smaller token budget of a "
                "setting also trained at a larger one, and a setting is ranked at its largest budget "
                "(`mixbench leaderboard --all-budgets` shows its row).")
    if runs:
        return (f"The board of `{root}` has no row for this model: its runs are hidden behind a newer row of the same "
                "configuration trained by newer code (`mixbench leaderboard --all-versions` shows them).")
    return f"The board of `{root}` has no row for this model: no run in the store scored these weights."


def _rank_line(board, row) -> str:
    if row.control:
        return "a control (docs/controls.md): trained and scored like the mixers, compared with them, never ranked"
    if row.external:
        return "an external model: shown beside the rows, never ranked"
    rank = board.rank.get(row.key)
    if rank is None:
        if row.key in board.unranked:
            return f"not ranked: it {_md(board.unranked[row.key], False)}"
        return f"not ranked: no column votes at preset {_md(row.preset, False)}"
    lo, hi = board.rank_interval.get(row.key) or (rank, rank)
    ranked = sum(1 for r in board.table.rows if r.preset == row.preset and board.rank.get(r.key) is not None)
    tied = "; it overlaps another row's, so the board shows it as tied" if board.tied.get(row.key) else ""
    return (f"rank {rank} of {ranked} at preset {_md(row.preset, False)} (Borda points {board.points[row.key]:g}; "
            f"{board.config.rank_level:.0%} bootstrap rank interval {lo}–{hi}{tied})")


def _difference(d) -> str:
    iv = "" if d.interval is None else f" [{d.interval.low:+.3g}, {d.interval.high:+.3g}]"
    return f"{d.difference:+.3g}{iv} on the {d.scale}' scale"


def _marks(board, row, column, cell) -> str:
    """The cell's marks as the board gives them, each with what it was compared with."""
    from harness.reporting.legend import CONTROL_MARK, OUTSIDE_MARK, UNRELIABLE_MARK

    key = (row.key, column.name)
    out = []
    comparisons = [c for c in board.vs_controls.get(key, []) if c.label in board.reference_controls
                   and not math.isnan(c.difference.difference)]
    if key in board.not_above_control:
        worse = [c for c in comparisons if not c.better] or comparisons
        out.append(f"{CONTROL_MARK} not better than the reference control " + "; ".join(
            f"{c.label} ({_difference(c.difference)})" for c in worse))
    elif comparisons:
        out.append("better than " + "; ".join(f"{c.label} ({_difference(c.difference)})" for c in comparisons))
    if key in board.not_above_null:
        d = board.vs_null.get(key)
        out.append(f"{CONTROL_MARK} not better than its own null model ({column.null_metric}, the same architecture "
                   "untrained)" + ("" if d is None else f" ({_difference(d)})"))
    if cell.unreliable:
        out.append(f"{UNRELIABLE_MARK} unreliable: {cell.unreliable}")
    if cell.outside_interval:
        out.append(f"{OUTSIDE_MARK} the point lies outside its interval")
    return _md("; ".join(out))


def board_row_lines(ckpt: Checkpoint, results: Any, runs: list) -> list[str]:
    """The card's results: this model's row of the board of the whole store ``results`` (a ResultsStore or its
    root), with the board's first lines; one line when the board has no row for it."""
    from harness.reporting.leaderboard import board_of
    from harness.reporting.preamble import preamble
    from harness.store.results import ResultsStore

    store = results if isinstance(results, ResultsStore) else ResultsStore(results)
    board = board_of(store)
    root = str(store.root).replace("`", "'")  # in a code span, where nothing else is read as Markdown
    row, note = _model_row(board, ckpt)
    if row is None:
        return [_no_row(board, ckpt, runs, root)]
    at_preset = _preset_board(board, row.preset)
    first = board.headline()
    lines = [f"This model's row of the board of the results store `{root}`, as `mixbench leaderboard --results "
             f"{root} --all` shows it.{note} The board's first lines:", ""]
    lines += [f"- **{_md(line, False)}**" if line == first else f"- {_md(line, False)}" for line in preamble(board)]
    gates = sorted({f"{r.manifest.gate.status} (v{r.manifest.gate.version})" for r in row.runs})
    seeds = ", ".join(map(str, row.seeds)) or "unknown"
    lines += ["", f"- row: {_md(row.label, False)} at preset {_md(row.preset, False)}; seeds {seeds} (this model is "
                  f"seed {ckpt.spec.train.seed}); conformance check {_md(', '.join(gates), False)}",
              f"- {_rank_line(board, row)}", "",
              "| suite | metric | value | interval | n | votes | marks |",
              "|---|---|---:|---|---:|---|---|"]
    for column in board.table.columns:
        cell = board.table.cell(row, column)
        if cell is None:
            continue
        verdict = at_preset.verdicts.get(column.name)
        if verdict is not None and verdict.votes:
            group = at_preset.group(row, column)
            votes = "yes" + (f" (tie group {group})" if group and not row.control else "")
        else:
            votes = "no: " + _md(verdict.reason if verdict is not None else "not on the board")
        suite = column.suite + (f"[{column.config}]" if column.config else "")
        lines.append(f"| {_md(suite)} | {_md(column.metric)} | {_fmt(cell.value)} | {_md(_interval(cell))} | "
                     f"{'' if cell.n is None else cell.n} | {votes} | {_marks(board, row, column, cell)} |")
    several = at_preset is not board
    lines += ["", f"Values are the board's: the mean over the row's seeds with its interval (kind and level named). "
                  f"*votes*: whether the column votes at preset {_md(row.preset, False)}"
                  + (" (the board lists a column as voting when it votes at any of its presets)" if several else "")
                  + ", with its tie group, or the board's reason why it does not. ‡: a cell not better than its "
                  "null (the reference control, paired test with the seed spread, Holm over the column's mixers, "
                  f"alpha {board.config.alpha:g}; or, in a column controls cannot score, its own untrained model): "
                  "it takes no Borda points. †: unreliable (it does not vote)."]
    return lines


def protocol_lines(ckpt: Checkpoint, parameters: int) -> list[str]:
    """What the board's first lines say of this model (docs/protocol.md): its backbone rule, its size against the
    matched reference, its budget, and whether its training values are its preset's tuned recipe."""
    from harness.model.recipes import UNTUNED, recipe_status
    from harness.model.specs import preset_defaults
    from harness.config import PRESETS, to_dict

    spec = ckpt.spec
    backbone = spec.model.backbone
    gates = {"none": "no residual gates", "mixer": f"a learnable gate on the mixer branch (starting at "
             f"{backbone.residual_gate_init:g})", "all": f"learnable gates on the mixer and MLP branches (starting "
             f"at {backbone.residual_gate_init:g})"}[backbone.residual_gates]
    lines = [f"- backbone rule: {gates}; the mixer's output projection initialised by the backbone, "
             f"N(0, {backbone.init_std:g}/sqrt(2 x {backbone.n_layers})), as every mixer's"]
    matched = ""
    if spec.preset in PRESETS:
        try:
            want, _ = preset_defaults(spec.preset, spec.model.mixer, spec.model.mixer_config,
                                      dataclasses.replace(backbone, ffn_hidden=0))
            matched = (f"MLP width {backbone.ffn_dim}: matched to {PRESETS[spec.preset].match_reference}'s "
                       "non-embedding parameters (within 5%)" if want.ffn_dim == backbone.ffn_dim
                       else f"MLP width {backbone.ffn_dim}: not the matched width ({want.ffn_dim})")
        except Exception:  # noqa: BLE001 - a mixer that cannot be matched at this backbone keeps its own width
            matched = f"MLP width {backbone.ffn_dim}"
        status = recipe_status(spec.preset, spec.model.mixer, spec.model.mixer_config, to_dict(spec.train),
                               to_dict(spec.model.backbone))
    else:
        status = UNTUNED
    lines.append(f"- size: {parameters:,} parameters" + (f"; {matched}" if matched else ""))
    lines.append(f"- budget: {spec.train.token_budget:,} training tokens ({spec.train.token_budget / parameters:.2g} "
                 f"per parameter), learning rate {spec.train.lr:g}: {status} (`tuned`: the value `mixbench tune` "
                 "chose on validation for this mixer at its preset)")
    return lines


def model_card(ckpt: Checkpoint, config: dict[str, Any], parameters: int, runs: list, results: Any = None) -> str:
    """The card; ``runs``: the store's runs of these weights, ``results``: the store (or its root) whose board the
    card copies (without it, the runs' own numbers and no claim on votes or ranks)."""
    spec = ckpt.spec
    export = config.get("mixbench_export", {})
    git = export.get("git") or {}
    revision = (git.get("commit") or "unknown") + (" (uncommitted changes)" if git.get("dirty") else "")
    mixer_config = json.dumps(config.get("mixer_config", {}), sort_keys=True)
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags:",
        "- mixbench",
        f"- mixer-{spec.model.mixer.replace(':', '-')}",
        "---",
        "",
        f"# mixbench `{spec.model.mixer}` model ({spec.preset or 'custom'} preset)",
        "",
        f"A LLaMA-style causal language model whose token mixer is mixbench's `{spec.model.mixer}`, trained with "
        f"mixbench and exported by `mixbench export`: {parameters:,} parameters, "
        f"{spec.model.backbone.n_layers} layers of width {spec.model.backbone.d_model}, context "
        f"{spec.model.backbone.context}, vocabulary {spec.model.backbone.vocab_size}.",
        "",
        "## Board row",
        "",
        *(board_row_lines(ckpt, results, runs) if results is not None else runs_table(runs)),
        "",
        "## Training protocol",
        "",
        *protocol_lines(ckpt, parameters),
        "",
        "## Identity and provenance",
        "",
        f"- mixer: `{spec.model.mixer}`, config `{mixer_config}`",
        f"- model identity: `{export.get('model_identity')}`",
        f"- weights sha256: `{export.get('weights_sha256')}` (step {export.get('checkpoint_step')})",
        f"- mixer code fingerprint: `{config.get('mixbench_code', {}).get('mixer_code')}`, backbone code "
        f"`{config.get('mixbench_code', {}).get('backbone_code')}`",
        f"- trained on `{spec.data.source}` (corpus fingerprint `{export.get('corpus_fingerprint')}`), "
        f"seed {spec.train.seed}, {spec.train.token_budget:,} tokens",
        f"- {trained_by(ckpt)}",
        f"- exported by mixbench {export.get('mixbench')}, revision `{revision}`",
        "",
        "## Loading",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "model = AutoModelForCausalLM.from_pretrained(FOLDER, trust_remote_code=True)  # needs mixbench installed",
        "tokenizer = AutoTokenizer.from_pretrained(FOLDER)",
        "```",
        "",
        "The modeling file builds the model with mixbench's own code and refuses a mixbench whose mixer or backbone "
        "code differs from the code at export (the same weights could give other numbers). `generate()` decodes "
        "through the mixer's recurrent `step()`; pad batches on the right (left padding is refused). "
        "Evaluate with lm-eval: "
        "`lm_eval --model hf --model_args pretrained=FOLDER,trust_remote_code=True,dtype=float32`.",
        "",
    ]
    return "\n".join(lines)
