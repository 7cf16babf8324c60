"""The model card (``README.md``) of an exported folder: what the model is, its board row, how to load it.

The board row is every headline metric of the runs that scored exactly these weights (matched by weight hash),
each with its interval and the interval's kind, and the gate's verdict: a reader of the card sees what the board
shows, not a number stripped of its uncertainty (docs/DESIGN.md §6). Nothing is invented when no store is given:
the card says that no results were attached.
"""

from __future__ import annotations

import json
from typing import Any

from harness.model.checkpoint import Checkpoint


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.4g}"


def _interval(metric) -> str:
    iv = metric.interval
    if iv is None:
        return "—"
    level = f" {iv.level:.0%}" if iv.level is not None else ""
    return f"[{_fmt(iv.low)}, {_fmt(iv.high)}] {iv.kind}{level}"


def board_row_table(runs: list) -> list[str]:
    """Markdown lines: suite, metric, value, interval, n, gate, run id (headline metrics of each run)."""
    if not runs:
        return ["No results were attached to this export (pass `--results STORE` to `mixbench export` to carry the "
                "model's board row)."]
    lines = ["| suite | metric | value | interval | n | votes | conformance check | run |",
             "|---|---|---:|---|---:|---|---|---|"]
    for run in runs:
        m = run.manifest
        headline = set(m.headline)
        for metric in run.metrics:
            if headline and metric.name not in headline:
                continue
            unreliable = (metric.unreliable or "").replace("|", "/")  # a table cell
            votes = "yes" if metric.votes else (f"no: {unreliable}" if unreliable else "no")
            lines.append(f"| {m.suite} | {metric.name} | {_fmt(metric.value)} | {_interval(metric)} | "
                         f"{'' if metric.n is None else metric.n} | {votes} | {m.gate.status} (v{m.gate.version}) | "
                         f"`{run.run_id[:12]}` |")
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
            import dataclasses

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


def model_card(ckpt: Checkpoint, config: dict[str, Any], parameters: int, runs: list) -> str:
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
        f"A LLaMA-style causal language model whose token mixer is mixbench's `{spec.model.mixer}`, trained by "
        f"`mixbench train` and exported by `mixbench export`: {parameters:,} parameters, "
        f"{spec.model.backbone.n_layers} layers of width {spec.model.backbone.d_model}, context "
        f"{spec.model.backbone.context}, vocabulary {spec.model.backbone.vocab_size}.",
        "",
        "## Board row",
        "",
        *board_row_table(runs),
        "",
        "Intervals are those the board shows (their kind and level are named); a metric marked `no` in *votes* "
        "does not rank models (a baseline, a diagnostic, or a number its suite found to measure nothing).",
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
        f"- mixbench {export.get('mixbench')}, revision `{revision}`",
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
