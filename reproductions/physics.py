"""Throughput physics: attention's prefill has a quadratic term in the context, a recurrence's has none, and a
recurrence decodes at a cost per token that does not grow with the context (the reason linear-cost mixers exist).

The claim is tested on what it is about: ``prefill_quadratic_share``, the share of c T^2 in a least-squares fit of
time = a + b T + c T^2 over the timed lengths (suites/throughput/analysis.py), not an exponent whose threshold
this project chose (docs/reproductions.md, "throughput-physics").
"""

from __future__ import annotations

from harness.registry import register_target
from harness.reproduction import Check, Measured, Negative, RunIndex, Step, Subject, Target
from reproductions.common import distinct

#: roles: the quadratic-cost mixer and the fixed-state mixers (the source's recurrence first); scale tiny times
#: ``linear_3`` only (mamba's import and build cost more than the whole smoke run)
LINEAR_ROLES = ("linear", "linear_2", "linear_3")
TINY_LINEAR = ("linear_3",)
#: the quadratic term is the larger part of attention's prefill at the longest length; a fixed-state mixer's is
#: at most this small (a fit over four lengths of linear timings, noise and cache effects included)
DOMINANT, SMALL = 0.5, 0.2
#: timings stable enough to fit: the 95% interval of each subject's prefill exponent narrower than this
#: (measured widths 0.008-0.06 at scale cpu when the lengths share rounds; 0.2-0.6 across unpaired runs)
STABLE_WIDTH = {"tiny": 2.0, "cpu": 0.15, "gpu": 0.15}


@register_target("throughput-physics")
class ThroughputPhysics(Target):
    source = ("the cost model of softmax attention (Vaswani et al. 2017, Table 1: O(n^2 d) per layer) against "
              "recurrent mixers (Gu & Dao 2023, \"Mamba\", Figure 8: linear prefill, constant decode per token)")
    published = ("Attention's prefill time grows quadratically with the context and its decode time per token "
                 "linearly (a growing KV cache); a recurrent mixer's prefill grows linearly and its decode time per "
                 "token stays flat.")
    checked = ("at preset quick over 1,024-8,192 tokens, a least-squares fit time = a + b T + c T^2 of the prefill "
               "per model (bootstrap over timed rounds, one resample for all lengths): attention's quadratic term "
               f"is positive and > {DOMINANT:g} of its fitted time at 8,192, and its decode latency ratio (8k / 1k) "
               f"> 1; each fixed-state mixer's quadratic share < {SMALL:g} and decode ratio < 1.3; precondition: each "
               f"model's prefill exponent interval narrower than {STABLE_WIDTH['cpu']:g} (stable timings)")
    departures = ("CPU timings of the whole model (embedding, MLPs and head add a linear term, which the fit "
                  "separates) with torch's CPU kernels; batch 1")
    cost = "about 10 min at scale cpu with the quick models trained (docs/reproductions.md)"
    subjects = {"quadratic": Subject("attention"), "linear": Subject("mamba"), "linear_2": Subject("deltanet"),
                "linear_3": Subject("protot")}

    def _linear_roles(self, scale: str) -> tuple[str, ...]:
        return TINY_LINEAR if scale == "tiny" else LINEAR_ROLES

    def _roles(self, scale: str) -> tuple[str, ...]:
        return ("quadratic", *self._linear_roles(scale))

    def negatives(self, scale: str) -> list[Negative]:
        fixed = self.subject(self._linear_roles(scale)[0])
        return [Negative(f"{fixed.mixer} in attention's place",
                         "a fixed-state mixer's prefill has no quadratic term, so its share of the time at the longest "
                         f"length cannot exceed {DOMINANT:g}", {"quadratic": fixed})]

    def steps(self, scale: str) -> list[Step]:
        subjects = distinct(self.subject(r) for r in self._roles(scale))
        if scale == "tiny":
            cfg = {"lengths": (64, 128, 256), "modes": ("prefill", "decode"), "repeats": 3, "warmup": 3,
                   "max_warmup": 3, "decode_tokens": 2, "floor": "", "reference": ""}
            return [Step.of("throughput", subjects, cfg, preset="tiny", train={"token_budget": 4096})]
        lengths = (1024, 2048, 4096, 8192) if scale == "cpu" else (4096, 8192, 16384, 32768)
        # 64 tokens per timed decode call: the prefill before each call evicts the caches, and with the suite's 8
        # tokens a recurrence's first, cold step made its decode look 1.5-2x slower after 8k tokens than after 2k
        # (docs/reproductions.md); the state itself does not grow
        cfg = {"lengths": lengths, "modes": ("prefill", "decode"), "repeats": 15, "decode_tokens": 64, "floor": "",
               "reference": "", "max_point_seconds": 180.0}
        return [Step.of("throughput", subjects, cfg, preset="quick")]

    def checks(self, runs: RunIndex, scale: str) -> list[Check]:
        quad = self.subject("quadratic")
        out = [_stable(runs, s, STABLE_WIDTH[scale]) for s in distinct(self.subject(r) for r in self._roles(scale))]
        share = runs.measured("throughput", quad, "prefill_quadratic_share")
        out += [Check(f"{quad.label} prefill: quadratic term c > 0 (its share at the longest length)", 0.0, True,
                      share),
                Check(f"{quad.label} prefill: quadratic share at the longest length", DOMINANT, True, share),
                Check(f"{quad.label} decode ratio (longest / shortest)", 1.0, True,
                      runs.measured("throughput", quad, "decode_ratio")),
                Check(f"{quad.label} prefill exponent", 1.7, True,
                      runs.measured("throughput", quad, "prefill_exponent"),
                      "the former home-made threshold, reported beside the claim", counts=False)]
        for role in self._linear_roles(scale):
            m = self.subject(role)
            out.append(Check(f"{m.label} prefill: quadratic share at the longest length", SMALL, False,
                             runs.measured("throughput", m, "prefill_quadratic_share")))
            out.append(Check(f"{m.label} decode ratio (longest / shortest)", 1.3, False,
                             runs.measured("throughput", m, "decode_ratio")))
        return out


def _stable(runs: RunIndex, mixer: Subject, width: float) -> Check:
    """Precondition: the timings are stable enough to fit, read as the width of ``mixer``'s prefill exponent's
    bootstrap interval (an exact number: the width of an interval has no interval of its own)."""
    e = runs.measured("throughput", mixer, "prefill_exponent")
    measured = None
    if e is not None and e.low is not None and e.high is not None:
        w = e.high - e.low
        measured = Measured(w, w, w, f"exact: width of the {e.kind} interval")
    return Check(f"{mixer.label}: timings stable (prefill exponent interval width)", width, False, measured,
                 "precondition: rounds that disagree make any fit of them meaningless", precondition=True)
