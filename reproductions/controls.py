"""Controls: every paper mixer beats a model that does no token mixing on perplexity (docs/controls.md).

A check of this harness (``kind = "check"``), not a reproduction: the recipe was chosen on validation with this
property as its rule (docs/protocol.md), so passing it shows the recipe is what it says, not a published result.
"""

from __future__ import annotations

from harness.registry import register_target
from harness.reproduction import CHECK, Check, Negative, RunIndex, Step, Subject, Target
from reproductions.common import PAPER_MIXERS


@register_target("controls")
class BeatsTheControl(Target):
    kind = CHECK
    source = ("the ProtoT paper (docs/PAPERS.md §A, its perplexity table: every mixer far below a bigram model) and "
              "docs/controls.md (the recipe at which mixbench's quickstart budget gives this)")
    published = "Every token mixer of the paper reaches a lower perplexity than a model without token mixing."
    checked = ("at preset quick, each paper mixer's held-out NLL per token minus the `none` control's, paired on "
               "the shared documents (bootstrap 95%), < 0")
    departures = "328k training tokens of the embedded corpus at width 128 (the paper: 250M tokens at width 256)"
    cost = "306 s at scale cpu (five quick models trained and scored; docs/reproductions.md)"
    subjects = {**{m: Subject(m) for m in PAPER_MIXERS}, "control": Subject("none")}

    def _roles(self, scale: str) -> tuple[str, ...]:
        return ("attention",) if scale == "tiny" else PAPER_MIXERS

    def negatives(self, scale: str) -> list[Negative]:
        # not `mean`: it averages the context, so it does mix tokens and may beat `none` honestly
        return [Negative("the none control in attention's place", "a model without token mixing cannot beat itself",
                         {"attention": Subject("none")})]

    def steps(self, scale: str) -> list[Step]:
        mixers = [self.subject(r) for r in self._roles(scale)]
        control = (self.subject("control").mixer,)
        if scale == "tiny":
            return [Step.of("perplexity", mixers, {"max_windows": 16}, preset="tiny", controls=control,
                            train={"token_budget": 8192})]
        preset = "paper-small" if scale == "gpu" else "quick"
        return [Step.of("perplexity", mixers, {}, preset=preset, controls=control)]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        control = self.subject("control")
        return [Check(f"{self.subject(r).label} - {control.label}, NLL per token", 0.0, False,
                      runs.paired_difference("perplexity", self.subject(r), control, "ppl"), "lower is better")
                for r in self._roles(scale)]
