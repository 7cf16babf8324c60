"""State tracking: negative eigenvalues let a linear recurrence track parity, attention does not carry parity past
its training length, and products of Householders let DeltaProduct track S3 in one layer (docs/state_tracking.md).

Every target runs the `synthetic` suite's state-tracking tasks (trained from scratch per mixer) and scores the
*final position* (the state after the whole sequence, Wilson 95% over test sequences), the label the sources
report. The `none` control (no token mixing) runs beside the mixers as a precondition: it must score near chance,
else the task leaks its answer and the other checks test nothing.

Two mixer configs of one mixer (DeltaNet with and without negative eigenvalues) are told apart by the full mixer
config each run's manifest records (``subject.mixer_config``), since the run index keys runs by mixer name.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from harness.registry import MIXERS, register_target
from harness.reproduction import Check, Measured, RunIndex, Step, Target

SUITE = "synthetic"
#: the precondition on the `none` control: its final-position accuracy's upper bound below this (chance is 0.5 for
#: parity, 1/6 for S3)
NONE_CEILING = {"parity": 0.6, "s3": 0.3}
#: "learns it": the lower Wilson bound above; "fails": the upper bound below (parity's chance is 0.5: 0.75 is half way
#: to perfect; S3's 0.5 is above the 1/3 that tracking the permutation's sign alone gives)
SOLVED, PARITY_FAILS, S3_FAILS = 0.9, 0.75, 0.5

NEG = {"allow_neg_eigval": True}
POS = {"allow_neg_eigval": False}


def _suite_config(task: str, scale: str) -> dict[str, Any]:
    """The synthetic suite's config for one state-tracking task at ``scale`` (the trained length L, tested at 2L
    and 4L; every mixer tested past L, attention included)."""
    if scale == "tiny":
        return {"tasks": task, "settings": f"{task}:seq_len=8,num_train_examples=64", "d_model": 16,
                "n_layers": 1, "max_steps": 4, "eval_every": 2, "lrs": "3e-3", "valid_examples": 16,
                "test_examples": 32, "extrapolation": "2", "extrapolate_all": True}
    if scale == "gpu":  # Grazzi et al.: trained up to length 40, tested to 256; 20,000 steps of 256
        return {"tasks": task, "settings": f"{task}:seq_len=64,num_train_examples=100000", "d_model": 64,
                "n_layers": 1, "batch_size": 256, "max_steps": 20000, "eval_every": 500,
                "lrs": "1e-3,3e-4", "extrapolation": "2,4", "extrapolate_all": True}
    return {"tasks": task, "settings": f"{task}:seq_len=32,num_train_examples=20000", "d_model": 32, "n_layers": 1,
            "batch_size": 64, "max_steps": 1500, "eval_every": 100, "lrs": "3e-3", "extrapolation": "2,4",
            "extrapolate_all": True}


def measured_for(runs: RunIndex, mixer: str, config: dict[str, Any], pattern: str) -> Measured | None:
    """The first metric matching ``pattern`` of ``mixer``'s synthetic run whose full mixer config holds every item
    of ``config`` (None when there is no such run or metric)."""
    for record in runs.records(SUITE, mixer):
        got = record.manifest.subject.mixer_config or {}
        if any(got.get(k) != v for k, v in config.items()):
            continue
        for m in record.metrics:
            if fnmatch.fnmatchcase(m.name, pattern):
                return Measured.of(m.value, m.interval)
    return None


def _label(config: dict[str, Any]) -> str:
    return "" if not config else " (" + ", ".join(f"{k}={v}" for k, v in config.items()) + ")"


def _none_precondition(runs: RunIndex, task: str) -> Check:
    return Check(f"none control, {task} final-position accuracy", NONE_CEILING[task], False,
                 measured_for(runs, "none", {}, f"{task}/*/final_acc"),
                 "a model without token mixing must stay near chance, else the labels leak", precondition=True)


@register_target("parity-negative-eigenvalues")
class ParityNegativeEigenvalues(Target):
    source = ("Grazzi et al. 2025, \"Unlocking State-Tracking in Linear RNNs Through Negative Eigenvalues\" (ICLR "
              "2025), Figure 1 (parity, Mamba [0,1] vs [-1,1], trained up to length 40, tested 40-256, 3 seeds) and "
              "its formal-language table (parity: DeltaNet [-1,1] 1.000, DeltaNet [0,1] 0.017, Mamba [0,1] 0.000 "
              "scaled accuracy); AutoML unlocking_state_tracking configs parity_delta_net*.yaml")
    published = ("A linear recurrence whose state transitions have only positive eigenvalues (Mamba, DeltaNet with "
                 "beta in (0, 1)) cannot learn parity, while DeltaNet with beta in (0, 2) (eigenvalues in [-1, 1]) "
                 "learns it and keeps it at lengths past training.")
    checked = ("parity trained at length L, one mixer layer: final-position accuracy (Wilson 95%) of deltanet with "
               "allow_neg_eigval=true > 0.9 at L and at 2L; of deltanet with allow_neg_eigval=false and of mamba "
               "< 0.75 at L (chance 0.5); precondition: the none control's < 0.6")
    departures = ("labels at every position (the source labels the end of a sequence of length 3-40), trained at "
                  "one length L = 32 for at most 1,500 steps of 64 (source: 20,000 of 256), width 32, one learning "
                  "rate, the mixbench backbone (an MLP in the block, tied embeddings); accuracy, not the source's "
                  "scaled accuracy ((acc - chance) / (1 - chance))")
    cost = "210 s at scale cpu (four runs with their gates; docs/state_tracking.md)"

    def steps(self, scale: str) -> list[Step]:
        cfg = _suite_config("parity", scale)
        steps = [Step(SUITE, ("deltanet",), cfg, mixer_configs={"deltanet": NEG}),
                 Step(SUITE, ("deltanet",), cfg, mixer_configs={"deltanet": POS}),
                 Step(SUITE, ("none",), cfg)]
        if scale != "tiny":  # importing mamba-ssm alone takes a minute on a loaded CPU
            steps.insert(2, Step(SUITE, ("mamba",), cfg))
        return steps

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        final, x2, x4 = "parity/*/final_acc", "parity/*/extrap_x2_final_acc", "parity/*/extrap_x4_final_acc"
        out = [
            _none_precondition(runs, "parity"),
            Check(f"deltanet{_label(NEG)}, parity final-position accuracy at L", SOLVED, True,
                  measured_for(runs, "deltanet", NEG, final)),
            Check(f"deltanet{_label(NEG)}, parity final-position accuracy at 2L", SOLVED, True,
                  measured_for(runs, "deltanet", NEG, x2), "lengths it never trained at"),
            Check(f"deltanet{_label(POS)}, parity final-position accuracy at L", PARITY_FAILS, False,
                  measured_for(runs, "deltanet", POS, final), "positive eigenvalues only"),
        ]
        if scale != "tiny":
            out.append(Check("mamba, parity final-position accuracy at L", PARITY_FAILS, False,
                             measured_for(runs, "mamba", {}, final), "a diagonal decay in (0, 1)"))
            out.append(Check(f"deltanet{_label(NEG)}, parity final-position accuracy at 4L", SOLVED, True,
                             measured_for(runs, "deltanet", NEG, x4), "reported: the source tests to 6.4x",
                             counts=False))
        return out


@register_target("parity-attention-length")
class ParityAttentionLength(Target):
    source = ("Grazzi et al. 2025 (ICLR 2025), formal-language table: Transformer parity 0.022 scaled accuracy on "
              "lengths 40-256 after training up to 40; Deletang et al. 2023, \"Neural Networks and the Chomsky "
              "Hierarchy\" (ICLR 2023), Transformers on Parity Check")
    published = "Attention does not carry parity to sequences longer than those it was trained on."
    checked = ("parity trained at length L, one attention layer (RoPE; its model built for 4L, trained at L): "
               "final-position accuracy (Wilson 95%) at 2L < 0.75 (chance 0.5); reported beside it: the same at L "
               "(a failure there is a failure to learn, not to generalise); precondition: the none control's < 0.6")
    departures = ("labels at every position, one trained length L = 32, at most 1,500 steps of 64, width 32, "
                  "RoPE attention (the source's Transformer uses its own positional scheme); attention declares no "
                  "length extrapolation, so this target sets the suite's extrapolate_all")
    cost = "103 s at scale cpu, reusing parity-negative-eigenvalues' none run (docs/state_tracking.md)"

    def steps(self, scale: str) -> list[Step]:
        cfg = _suite_config("parity", scale)  # the same config as parity-negative-eigenvalues: one `none` run
        return [Step(SUITE, ("attention",), cfg), Step(SUITE, ("none",), cfg)]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        return [
            _none_precondition(runs, "parity"),
            Check("attention, parity final-position accuracy at 2L", PARITY_FAILS, False,
                  measured_for(runs, "attention", {}, "parity/*/extrap_x2_final_acc"), "positions it never trained at"),
            Check("attention, parity final-position accuracy at L", SOLVED, True,
                  measured_for(runs, "attention", {}, "parity/*/final_acc"),
                  "reported: whether it learned parity where it trained", counts=False),
        ]


#: DeltaProduct's mixer (being added to mixers/ by name): its config must have these fields for the claim
DELTAPRODUCT = "gated-deltaproduct"
DELTAPRODUCT_FIELDS = ("num_householder", "allow_neg_eigval")


def deltaproduct_missing() -> str:
    """Why the DeltaProduct target cannot run here ("" when it can): the mixer or a config field it needs."""
    if DELTAPRODUCT not in MIXERS.names():
        return f"mixer {DELTAPRODUCT} is not registered"
    fields = {f.name for f in dataclasses.fields(MIXERS.get(DELTAPRODUCT).config_cls)}
    lacking = [f for f in DELTAPRODUCT_FIELDS if f not in fields]
    return f"{DELTAPRODUCT}'s config has no {', '.join(lacking)}" if lacking else ""


def householders(n: int) -> dict[str, Any]:
    return {"num_householder": n, "allow_neg_eigval": True}


@register_target("deltaproduct-s3")
class DeltaProductS3(Target):
    source = ("Siems et al. 2025, \"DeltaProduct: Improving State-Tracking in Linear RNNs via Householder "
              "Products\" (arXiv 2502.10297): one-layer DeltaProduct_n_h[-1,1] on group word problems (S3, S4, A5, "
              "S5) against the number of Householder products n_h")
    published = ("With one layer and eigenvalues in [-1, 1], a product of n_h = 2 generalized Householders per token "
                 "tracks S3 (whose elements are rotations and reflections of the plane), while one Householder "
                 "(DeltaNet) does not.")
    checked = ("S3 trained at length L, one mixer layer: final-position accuracy (Wilson 95%) of gated-deltaproduct "
               "with num_householder=2, allow_neg_eigval=true > 0.9; with num_householder=1 < 0.5 (chance 1/6; "
               "the permutation's sign alone gives 1/3); preconditions: the mixer is registered with those config "
               "fields, and the none control's accuracy < 0.3")
    departures = ("labels at every position, one trained length L = 32 (tested at 2L and 4L), at most 1,500 steps of "
                  "64, width 32, one learning rate, the mixbench backbone; the gated variant with its forget gate "
                  "on (fla's default)")

    @property
    def cost(self) -> str:  # type: ignore[override]
        """Measured since the mixer was registered (docs/state_tracking.md); where it is missing, why."""
        why = deltaproduct_missing()
        return f"not measured here ({why})" if why else \
            "148 s at scale cpu (three runs with their gates; docs/state_tracking.md)"

    def steps(self, scale: str) -> list[Step]:
        if deltaproduct_missing():
            return []  # checks() says why; nothing else can run
        cfg = _suite_config("s3", scale)
        return [Step(SUITE, (DELTAPRODUCT,), cfg, mixer_configs={DELTAPRODUCT: householders(2)}),
                Step(SUITE, (DELTAPRODUCT,), cfg, mixer_configs={DELTAPRODUCT: householders(1)}),
                Step(SUITE, ("none",), cfg)]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        why = deltaproduct_missing()
        registered = Check(f"{DELTAPRODUCT} registered with {', '.join(DELTAPRODUCT_FIELDS)}", 0.5, True,
                           Measured(0.0 if why else 1.0, 0.0 if why else 1.0, 0.0 if why else 1.0, "registry lookup"),
                           why or "1: present", precondition=True)
        if why:
            return [registered]
        final = "s3/*/final_acc"
        return [
            registered,
            _none_precondition(runs, "s3"),
            Check(f"{DELTAPRODUCT}{_label(householders(2))}, S3 final-position accuracy at L", SOLVED, True,
                  measured_for(runs, DELTAPRODUCT, householders(2), final)),
            Check(f"{DELTAPRODUCT}{_label(householders(1))}, S3 final-position accuracy at L", S3_FAILS, False,
                  measured_for(runs, DELTAPRODUCT, householders(1), final), "one Householder per token"),
            Check(f"{DELTAPRODUCT}{_label(householders(2))}, S3 final-position accuracy at 2L", SOLVED, True,
                  measured_for(runs, DELTAPRODUCT, householders(2), "s3/*/extrap_x2_final_acc"),
                  "reported: lengths it never trained at", counts=False),
        ]
