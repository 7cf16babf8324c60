"""Zoology's width-versus-length claim (Arora et al. 2023, Figure 2): a gated convolution needs a model width that
grows with the sequence length to solve MQAR, attention solves it at every width. Runs the `synthetic` suite's
MQAR at each width of a grid (one step per width: the width is the suite's ``d_model``); docs/reproductions.md
gives the protocol, its departures from the source's, and the measured grid.
"""

from __future__ import annotations

from harness.registry import register_target
from harness.reproduction import Check, Measured, Negative, RunIndex, Step, Subject, Target, interval_difference
from reproductions.common import measured_like

#: per scale: the widths, the (length, key-value pairs) settings (pairs = length / 16, as Figure 2 grows them up
#: to 256; its 512 has 64), the vocabulary, and the suite's training
GRIDS = {
    "tiny": {"widths": (16, 32), "settings": ((16, 1), (32, 2)), "vocab": 64, "examples": 256,
             "train": {"max_steps": 5, "eval_every": 5, "lrs": "3e-3", "batch_size": 16, "test_examples": 64,
                       "valid_examples": 32}},
    # attention sat on its 0.25 plateau after 2,000 steps of 32 at lr 3e-3 at (64, 4), width 32 (0.13 at width 16),
    # as zoology-mqar's CPU notes found; the CPU grid is shifted down a length and trains at 1e-3. Width 16 (4 heads
    # of 4 channels, below Figure 2's 64) left attention at 0.26 on (32, 2): docs/reproductions.md
    "cpu": {"widths": (32, 64, 128), "settings": ((16, 1), (32, 2)), "vocab": 64,
            "train": {"max_steps": 1500, "eval_every": 250, "lrs": "1e-3", "batch_size": 32}},
    "gpu": {"widths": (64, 128, 256, 512), "settings": ((64, 4), (128, 8), (256, 16), (512, 64)), "vocab": 8192,
            "train": {"max_steps": 20000, "lrs": "1e-2,2.15e-3,4.64e-4,1e-4"}},
}
#: the accuracy that counts as solving MQAR (zoology stops training at 0.99 and reads its figure at about 0.9)
SOLVED = 0.9


@register_target("zoology-width-length")
class ZoologyWidthLength(Target):
    source = ("Arora et al. 2023, \"Zoology: Measuring and Improving Recall in Efficient Language Models\", "
              "Figure 2 and Section 4 (BaseConv); HazyResearch/zoology zoology/mixers/base_conv.py")
    published = ("Gated convolutions need a model width that grows with the sequence length (and the number of "
                 "key-value pairs) to solve multi-query associative recall, while attention solves it at every width "
                 "and length.")
    checked = (f"attention's MQAR accuracy > {SOLVED} at every cell of the width x length grid (Wilson 95%); "
               f"precondition: the gated convolution learned the shortest setting (> {SOLVED}) at some width; at the "
               f"narrowest width where it did, its accuracy at each longer setting is < {SOLVED} (the width it needs "
               "grows with the length) and lower than at the shortest (the difference of two independent Wilson "
               "intervals > 0)")
    departures = ("widths 32-128 and lengths 16 and 32 (Figure 2: widths 64-512, lengths 64-512), vocabulary 64 "
                  "(8,192), at most 1,500 steps of 32 examples at one learning rate (1e-3; Figure 2 sweeps four), "
                  "the backbone's MLP in each block (Figure 2: none), BaseConv's short and long convolutions in one "
                  "layer with input and output projections (zoology alternates them across layers), and RoPE "
                  "instead of learned positions for attention; the GPU scale runs Figure 2's grid")
    cost = "about 25 CPU minutes at scale cpu (12 trainings; docs/reproductions.md)"
    subjects = {"subject": Subject("attention"), "gated_conv": Subject("baseconv", {"filter_len": 512})}

    def negatives(self, scale: str) -> list[Negative]:
        return [Negative("attention in the gated convolution's place",
                         "attention solves MQAR at every width, so the width it needs cannot grow with the length",
                         {"gated_conv": Subject("attention")})]

    def steps(self, scale: str) -> list[Step]:
        grid = GRIDS[scale]
        examples = f",num_train_examples={grid['examples']}" if "examples" in grid else ""  # else zoology's
        settings = ";".join(f"mqar:seq_len={L},num_kv_pairs={kv},vocab_size={grid['vocab']}{examples}"
                            for L, kv in grid["settings"])
        subjects = [self.subject("subject"), self.subject("gated_conv")]
        return [Step.of("synthetic", subjects, {"tasks": "mqar", "settings": settings, "d_model": width,
                                                "extrapolation": "", **grid["train"]})
                for width in grid["widths"]]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        grid = GRIDS[scale]
        widths, settings = grid["widths"], grid["settings"]

        def accuracy(subject: Subject, width: int, setting: tuple[int, int]) -> Measured | None:
            pattern = f"mqar/seq{setting[0]}_kv{setting[1]}*/acc"
            return measured_like(runs, "synthetic", subject, pattern, {"d_model": width})

        attention, conv = self.subject("subject"), self.subject("gated_conv")
        out = [Check(f"{attention.label}, MQAR {s} accuracy at width {w}", SOLVED, True, accuracy(attention, w, s))
               for w in widths for s in settings]
        shortest = settings[0]
        learned = {w: accuracy(conv, w, shortest) for w in widths}
        solved = [w for w, m in learned.items() if m is not None and m.low is not None and m.low > SOLVED]
        best = max((m for m in learned.values() if m is not None and m.low is not None), key=lambda m: m.low,
                   default=None)
        out.append(Check(f"{conv.label} learned MQAR {shortest} at some width", SOLVED, True, best,
                         "the best lower bound over the widths; failing a longer setting shows nothing otherwise",
                         precondition=True))
        width = solved[0] if solved else widths[-1]
        where = (f"width {width}, the narrowest where it learned {shortest}" if solved
                 else f"width {width} (the widest: it learned {shortest} at none)")
        for s in settings[1:]:
            longer = accuracy(conv, width, s)
            out.append(Check(f"{conv.label}, MQAR {s} accuracy at {where}", SOLVED, False, longer,
                             "the width it needs grows with the length"))
            if learned[width] is not None and longer is not None:
                out.append(Check(f"{conv.label} at width {width}: accuracy {shortest} - {s}", 0.0, True,
                                 interval_difference(learned[width], longer),
                                 "interval of the difference of two independent Wilson intervals"))
        return out
