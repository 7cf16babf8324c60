"""Recall: zoology's MQAR (Arora et al. 2023, Figure 2) and the MAD score (Poli et al. 2024) of the DeltaNet paper.

Both run the `synthetic` suite (it trains small models of each mixer from scratch); docs/reproductions.md gives
the sources' protocols and how ours departs from them.
"""

from __future__ import annotations

from harness.registry import register_target
from harness.reproduction import Check, Measured, Negative, RunIndex, Step, Subject, Target, interval_difference
from reproductions.common import FIXED_STATE, PAPER_MIXERS, distinct, measured_like

#: MQAR settings checked per scale: (sequence length, key-value pairs); Figure 2's panels run to (512, 64)
MQAR_SETTINGS = {"tiny": ((32, 2), (64, 4)), "cpu": ((64, 4), (128, 8)),
                 "gpu": ((64, 4), (128, 8), (256, 16), (512, 64))}
#: the CPU protocol's vocabulary: zoology's basic example's (Figure 2: 8192); it must exceed the longest length
MQAR_VOCAB = 256


def _mqar_settings(vocab: int, settings: tuple[tuple[int, int], ...]) -> str:
    return ";".join(f"mqar:seq_len={s},num_kv_pairs={kv},vocab_size={vocab}" for s, kv in settings)


@register_target("zoology-mqar")
class ZoologyMQAR(Target):
    source = ("Arora et al. 2023, \"Zoology: Measuring and Improving Recall in Efficient Language Models\", "
              "Figure 2; HazyResearch/zoology zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py")
    published = ("Attention solves multi-query associative recall (accuracy 0.97-0.98) at every width from 64 and "
                 "every length from 64 to 512, while fixed-state mixers lose accuracy as the length and the number "
                 "of key-value pairs grow.")
    checked = ("attention accuracy > 0.9 at every setting, width 64 (Wilson 95%); precondition: some fixed-state "
               "mixer learned the easiest setting (> 0.9), since failing a task it never learned shows nothing; for "
               "each fixed-state mixer that learned it, its accuracy falls from the easiest to the hardest setting "
               "(difference > 0) and attention's exceeds it at the hardest (paired on the shared test examples); a "
               "fixed-state mixer that did not learn the easiest setting, or that solves the hardest too (it fits in "
               "its state), is reported, not counted, and without a counted one the verdict is inconclusive; the GPU "
               "protocol checks Figure 2's four lengths up to (512, 64)")
    departures = (f"vocabulary {MQAR_VOCAB} (Figure 2: 8192), lengths 64 and 128 only, at most 4,000 steps of 64 "
                  "examples (256,000; Figure 2: 64 epochs of 100,000) at one learning rate (1e-3; Figure 2 sweeps "
                  "four), the backbone's MLP in each block (Figure 2: none), and RoPE instead of learned positions "
                  "for attention; the width-versus-length trend is zoology-width-length's")
    cost = "2,361 s at scale cpu (four mixers, two settings; docs/reproductions.md)"
    subjects = {"attention": Subject("attention"), **{m: Subject(m) for m in FIXED_STATE}}

    def _fixed_roles(self, scale: str) -> tuple[str, ...]:
        return ("protot",) if scale == "tiny" else FIXED_STATE

    def negatives(self, scale: str) -> list[Negative]:
        fixed = "protot" if scale == "tiny" else "mamba"
        return [Negative(f"{fixed} in attention's place", "a fixed-state mixer is the claim's counterexample: it must "
                         "not solve every setting with attention's margin over the others",
                         {"attention": Subject(fixed)})]

    def steps(self, scale: str) -> list[Step]:
        subjects = [self.subject(r) for r in ("attention", *self._fixed_roles(scale))]
        if scale == "tiny":
            cfg = {"tasks": "mqar", "settings": _mqar_settings(128, MQAR_SETTINGS["tiny"]), "max_steps": 20,
                   "eval_every": 10, "lrs": "3e-3", "test_examples": 64, "valid_examples": 32, "extrapolation": ""}
        elif scale == "gpu":
            cfg = {"tasks": "mqar", "settings": _mqar_settings(8192, MQAR_SETTINGS["gpu"]),
                   "d_model": 128, "max_steps": 20000, "lrs": "1e-2,2.15e-3,4.64e-4,1e-4", "extrapolation": ""}
        else:  # at batch 32 and 3,000 steps attention was still rising at (64, 4) with lr 1e-3 (0.78) and stuck on
            # a plateau with 3e-3 (0.22): docs/reproductions.md
            cfg = {"tasks": "mqar", "settings": _mqar_settings(MQAR_VOCAB, MQAR_SETTINGS["cpu"]), "d_model": 64,
                   "batch_size": 64, "max_steps": 4000, "eval_every": 250, "lrs": "1e-3", "extrapolation": ""}
        return [Step.of("synthetic", subjects, cfg)]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        settings = MQAR_SETTINGS[scale]
        easy, hard = settings[0], settings[-1]
        label = lambda s: f"mqar/seq{s[0]}_kv{s[1]}*/acc"  # noqa: E731
        attention = self.subject("attention")
        out = [Check(f"{attention.label}, MQAR {s} accuracy", 0.9, True,
                     measured_like(runs, "synthetic", attention, label(s))) for s in settings]
        fixed = [self.subject(r) for r in self._fixed_roles(scale) if self.subject(r) != attention]
        learned = {m.label: measured_like(runs, "synthetic", m, label(easy)) for m in fixed}
        best = max((v for v in learned.values() if v is not None and v.low is not None), key=lambda v: v.low,
                   default=None)
        out.append(Check(f"the best fixed-state mixer learned MQAR {easy}", 0.9, True, best,
                         "its lower bound the highest of them", precondition=True))
        counted = 0
        for m in fixed:
            own = learned[m.label]
            took = own is not None and own.low is not None and own.low > 0.9
            out.append(Check(f"{m.label} learned MQAR {easy}", 0.9, True, own,
                             "counted below only if it did" if took else "did not learn it: not counted below",
                             counts=False))
            if not took:
                continue
            hard_m = measured_like(runs, "synthetic", m, label(hard))
            if hard_m is not None and hard_m.low is not None and hard_m.low > 0.9:
                # neither support nor contradiction: this setting fits in its state (it used to count as support)
                out.append(Check(f"{m.label} solves MQAR {hard} too", 0.9, True, hard_m,
                                 "the setting fits in its state at this size: not counted", counts=False))
                continue
            counted += 1
            if hard_m is not None:
                out.append(Check(f"{m.label}: accuracy {easy} - {hard}", 0.0, True, interval_difference(own, hard_m),
                                 "interval of the difference of two independent Wilson intervals"))
            diff = runs.paired_difference("synthetic", attention, m, _exact(runs, m, label(hard)))
            out.append(Check(f"{attention.label} - {m.label}, MQAR {hard} accuracy", 0.0, True, diff))
        if not counted:
            out.append(Check(f"a fixed-state mixer that learned MQAR {easy} and does not solve {hard}", 0.0, True,
                             None, "none: nothing here tests the claim's degradation"))
        return out


#: MAD's six tasks, in the DeltaNet paper's table order
MAD_TASKS = ("compression", "fuzzy-recall", "in-context-recall", "memorization", "noisy-recall", "selective-copy")
#: Yang et al. 2024 (DeltaNet), the MAD table (Transformer, Mamba: "directly borrowed from Poli et al."), test
#: accuracy per task over MAD's settings: role -> task -> accuracy. Each row's mean is the table's "Average"
#: (74.5, 69.3, 71.8), which the tests recompute
MAD_PUBLISHED = {
    "transformer": {"compression": 0.516, "fuzzy-recall": 0.298, "in-context-recall": 0.941, "memorization": 0.852,
                    "noisy-recall": 0.868, "selective-copy": 0.996},
    "mamba": {"compression": 0.527, "fuzzy-recall": 0.067, "in-context-recall": 0.904, "memorization": 0.895,
              "noisy-recall": 0.901, "selective-copy": 0.863},
    "deltanet": {"compression": 0.422, "fuzzy-recall": 0.357, "in-context-recall": 1.0, "memorization": 0.528,
                 "noisy-recall": 1.0, "selective-copy": 1.0},
}
#: tasks run per scale: the CPU subset was chosen to fit about 30 min of this machine's CPU for the three mixers and
#: the negative, an estimate that no whole run has confirmed yet (docs/reproductions.md, "Measured on this machine")
MAD_SCALE_TASKS = {"tiny": ("in-context-recall", "memorization"),
                   "cpu": ("fuzzy-recall", "in-context-recall", "memorization"),
                   "gpu": MAD_TASKS}
#: fuzzy recall's steps at scale cpu (it never reaches the early stop: its whole schedule is spent on every mixer)
MAD_FUZZY_STEPS = 1500
#: a published per-task gap this large is checked as an ordering (paired on the shared test examples)
MAD_GAP = 0.2
#: the Transformer's in-context recall above this: off the 0.31 plateau it sits on before its induction circuit
#: forms (docs/reproductions.md), so a budget too short for it makes the target inconclusive, not false
MAD_LEARNED = {"tiny": 0.0, "cpu": 0.5, "gpu": 0.5}
#: the MAD score must lie within this of the published mean over the same tasks
MAD_TOLERANCE = {"tiny": 1.0, "cpu": 0.1, "gpu": 0.05}


def mad_score(parts: list) -> Measured | None:
    """The MAD score: the unweighted mean of the per-task scores (each a ``K/avg`` metric, itself the mean over
    the task's settings), with a normal interval from the tasks' intervals put on one scale (their test examples
    are disjoint, so their errors add in quadrature). The settings are MAD's fixed grid, not a sample: the interval
    is over the test examples only. None when a task is missing."""
    import math

    from harness.stats import normal_interval

    if not parts or any(p is None for p in parts):
        return None
    mean = sum(p.value for p in parts) / len(parts)
    stderrs = [None if p.interval is None else p.interval.normal_stderr() for p in parts]
    if any(s is None for s in stderrs):
        return Measured(mean)
    level = parts[0].interval.level or 0.95
    iv = normal_interval(mean, math.sqrt(sum(s * s for s in stderrs)) / len(parts), level)
    return Measured.of(mean, iv)


@register_target("mad-score")
class MADScore(Target):
    source = ("Poli et al. 2024, \"Mechanistic Design and Scaling of Hybrid Architectures\" (athms/mad-lab), as "
              "tabulated in Yang et al. 2024, \"Parallelizing Linear Transformers with the Delta Rule over Sequence "
              "Length\", the MAD table: per task and average for Transformer, Mamba and DeltaNet")
    published = ("On MAD's six tasks (compression, fuzzy recall, in-context recall, memorization, noisy recall, "
                 "selective copy) the Transformer averages 74.5, DeltaNet 71.8 and Mamba 69.3; DeltaNet and the "
                 "Transformer beat Mamba on fuzzy recall (35.7, 29.8 against 6.7) and lose to it on memorization "
                 "(52.8 for DeltaNet against 85.2 and 89.5).")
    checked = (f"each mixer's MAD score (mean over the tasks run of the per-task mean over settings; normal 95% over "
               f"the test examples) within {MAD_TOLERANCE['cpu']:g} ({MAD_TOLERANCE['gpu']:g} at the GPU scale) of the "
               f"published mean over the same tasks; every published per-task gap of at least {MAD_GAP:g} has the "
               "published sign (paired bootstrap on the shared test examples); at the GPU scale (all six tasks) "
               "the averages' order Transformer > DeltaNet > Mamba; preconditions: every subject beats chance on "
               f"memorization (the protocol trains) and the Transformer's in-context recall > {MAD_LEARNED['cpu']:g} "
               "(the budget forms its induction circuit)")
    departures = ("fuzzy recall, in-context recall and memorization at their baseline settings only (MAD: six tasks, "
                  "about 11 settings each), one learning rate (1e-3) and weight decay 0.1 instead of MAD's 3 x 2 "
                  "sweep, at most 8,000 steps of 64 examples with a stop at 0.99 validation accuracy (fuzzy recall: "
                  "1,500; MAD: 20,000 of 128), the best run by validation (MAD: by test) accuracy, micro- not "
                  "macro-averaged accuracy, and the mixbench backbone (an MLP in every block) at width 64 (MAD: 128)")
    cost = ("not measured: its CPU run had not finished its first model after 48 min beside other work "
            "(docs/reproductions.md, \"Measured on this machine\")")
    subjects = {"transformer": Subject("attention"), "mamba": Subject("mamba"), "deltanet": Subject("deltanet")}

    def _roles(self, scale: str) -> tuple[str, ...]:
        return ("transformer",) if scale == "tiny" else tuple(MAD_PUBLISHED)

    def negatives(self, scale: str) -> list[Negative]:
        role = self._roles(scale)[-1]  # deltanet: not the anchor of the recall precondition (but at scale tiny)
        return [Negative(f"none in {role}'s place",
                         "a model that mixes no tokens cannot recall from its context, so its MAD score falls far "
                         f"below {role}'s published one and it cannot beat another mixer on fuzzy recall",
                         {role: Subject("none")})]

    def steps(self, scale: str) -> list[Step]:
        tasks = ",".join(MAD_SCALE_TASKS[scale])
        subjects = distinct(self.subject(r) for r in self._roles(scale))
        if scale == "tiny":
            cfg = {"tasks": tasks, "settings": "in-context-recall:seq_len=32,num_train_examples=256", "d_model": 32,
                   "max_steps": 10, "eval_every": 10, "lrs": "3e-3", "test_examples": 32, "valid_examples": 16,
                   "extrapolation": ""}
        elif scale == "gpu":  # MAD's own: its full grid, width 128, batch 128, 20,000 steps, its 3 x 2 sweep
            cfg = {"tasks": tasks, "grid": "full", "d_model": 128, "batch_size": 128, "max_steps": 20000,
                   "lrs": "1e-3,5e-4,1e-4", "weight_decays": "0,0.1", "test_examples": 1280, "extrapolation": ""}
        else:
            # attention leaves its 0.31 plateau on in-context recall near step 2,000 of an 8,000-step cosine schedule
            # at batch 64, lr 1e-3, then stops at 0.99; on a 4,000-step schedule it ended at 0.71. Fuzzy recall never
            # reaches the stop, so it gets its own, shorter schedule (the suite's schedule is one per run)
            base = {"d_model": 64, "batch_size": 64, "eval_every": 250, "lrs": "1e-3", "extrapolation": ""}
            recall = ",".join(t for t in MAD_SCALE_TASKS[scale] if t != "fuzzy-recall")
            return [Step.of("synthetic", subjects, {**base, "tasks": recall, "max_steps": 8000}),
                    Step.of("synthetic", subjects, {**base, "tasks": "fuzzy-recall", "max_steps": MAD_FUZZY_STEPS})]
        return [Step.of("synthetic", subjects, cfg)]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        tasks, roles = MAD_SCALE_TASKS[scale], self._roles(scale)
        mixer = {r: self.subject(r) for r in roles}
        tol = MAD_TOLERANCE[scale]
        out = []
        for r in roles:  # precondition: the protocol trains each subject (memorization needs no token mixing)
            m = runs.metric("synthetic", mixer[r], _exact(runs, mixer[r], "memorization/avg*"))
            out.append(Check(f"{mixer[r].label}: memorization above chance", 0.0 if m is None else float(m.chance or 0),
                             True, None if m is None else Measured.of(m.value, m.interval),
                             "precondition: the protocol trains this subject", precondition=True))
        anchor = mixer[roles[0]]  # precondition: the budget lets the Transformer off its 0.31 plateau on recall
        out.append(Check(f"{anchor.label}: in-context recall learned", MAD_LEARNED[scale], True,
                         measured_like(runs, "synthetic", anchor, "in-context-recall/avg*"),
                         "precondition: the budget forms the induction circuit the source's 94.1 needs",
                         precondition=True))
        scores = {}
        for r in roles:
            parts = [runs.metric("synthetic", mixer[r], _exact(runs, mixer[r], f"{t}/avg*")) for t in tasks]
            scores[r] = mad_score(parts)
            published = sum(MAD_PUBLISHED[r][t] for t in tasks) / len(tasks)
            what = f"{mixer[r].label} MAD score over {len(tasks)} of 6 tasks (published {r}: {published:.3f})"
            out.append(Check(f"{what}, low side", published - tol, True, scores[r]))
            out.append(Check(f"{what}, high side", published + tol, False, scores[r]))
        for t in tasks:  # the published per-task gaps large enough to be read as orderings
            for a in roles:
                for b in roles:
                    gap = MAD_PUBLISHED[a][t] - MAD_PUBLISHED[b][t]
                    if gap >= MAD_GAP and mixer[a] != mixer[b]:
                        diff = runs.paired_difference("synthetic", mixer[a], mixer[b],
                                                      _exact(runs, mixer[a], f"{t}/avg*"))
                        what = f"{t}: {mixer[a].label} - {mixer[b].label} (published {a} - {b}: {gap:+.3f})"
                        out.append(Check(what, 0.0, True, diff))
        if scale == "gpu":  # the averages' order, Transformer > DeltaNet > Mamba
            for a, b in (("transformer", "deltanet"), ("deltanet", "mamba")):
                if scores[a] is not None and scores[b] is not None:
                    out.append(Check(f"MAD score: {mixer[a].label} - {mixer[b].label}", 0.0, True,
                                     interval_difference(scores[a], scores[b]),
                                     "interval of the difference of two normal intervals"))
        return out


def _exact(runs: RunIndex, mixer: "str | Subject", pattern: str) -> str:
    """The full name of the metric ``pattern`` finds in ``mixer``'s run (paired comparisons need one name)."""
    import fnmatch

    for record in runs.records("synthetic", mixer):
        for m in record.metrics:
            if fnmatch.fnmatchcase(m.name, pattern):
                return m.name
    return pattern
