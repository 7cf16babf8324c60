"""Controls: every paper mixer beats a model that does no token mixing on perplexity (docs/controls.md)."""

from __future__ import annotations

from harness.registry import register_target
from harness.reproduction import Check, RunIndex, Step, Target
from reproductions.common import PAPER_MIXERS


@register_target("controls")
class BeatsTheControl(Target):
    source = ("the ProtoT paper (docs/PAPERS.md §A, its perplexity table: every mixer far below a bigram model) and "
              "docs/controls.md (the recipe at which mixbench's quickstart budget gives this)")
    published = "Every token mixer of the paper reaches a lower perplexity than a model without token mixing."
    checked = ("at preset quick, each paper mixer's held-out NLL per token minus the `none` control's, paired on "
               "the shared documents (bootstrap 95%), < 0")
    departures = "328k training tokens of the embedded corpus at width 128 (the paper: 250M tokens at width 256)"
    cost = "306 s at scale cpu (five quick models trained and scored; docs/reproductions.md)"

    def steps(self, scale: str) -> list[Step]:
        if scale == "tiny":
            return [Step("perplexity", ("attention",), {"max_windows": 16}, preset="tiny", controls=("none",),
                         train={"token_budget": 8192})]
        preset = "paper-small" if scale == "gpu" else "quick"
        return [Step("perplexity", PAPER_MIXERS, {}, preset=preset, controls=("none",))]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        mixers = ("attention",) if scale == "tiny" else PAPER_MIXERS
        return [Check(f"{m} - none, NLL per token", 0.0, False, runs.paired_difference("perplexity", m, "none", "ppl"),
                      "lower is better") for m in mixers]
