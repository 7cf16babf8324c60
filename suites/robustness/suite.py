"""The robustness suite: how far a mixer's next-token predictions move under small edits of the input (docs/DESIGN.md §5).

Pairs come from the held-out splits (by default 500 per slice from sentences of 6-30 words of every held-out split;
built once per corpus and cached, see :mod:`suites.robustness.pairs`) or from a user's pair file;
:mod:`suites.robustness.scoring` turns them into per-pair numbers. Metric names are
``<stat>/<slice>`` per slice, and over the robustness families (the sensitivity slices excluded)
``<stat>/mean`` (each family weighted equally) and ``<stat>/worst`` (HELM's worst case over perturbations);
``<stat>/sensitivity`` averages the attribute flips. Stats:

* ``jsd_final`` mean JSD (bits) at the final position; ``jsd_after`` mean over pairs of the per-pair mean JSD over
  the positions after the last edit; ``top10`` top-k overlap; ``spearman`` over the union of the top-k; ``top1``
  top-1 agreement (all at the final position);
* ``dppl``: relative change in perplexity of the shared suffix after the edit, exp(sum of NLL differences / suffix
  tokens) - 1, token-weighted over the slice's pairs (the edited tokens themselves are not scored: a typo is
  surprising by design; what matters is whether the rest of the sentence still reads as before);
* ``jsd_d1``, ``jsd_d2``, ``jsd_d3-4`` ... ``jsd_d17+``: JSD averaged over aligned positions at that distance in tokens
  after the edit (ratio of sums over pairs);
* ``route_write`` / ``route_read``: mean JSD of the routing gate distributions at aligned positions (mixers that
  record ProtoT's gates).

Directions: on robustness slices less change is better; on sensitivity slices (attribute flips) the change metrics
are reversed, since noticing the flip is the expected behaviour; ``dppl`` is lower-is-better everywhere.

Intervals are cluster bootstraps over *unique* (original, perturbed) pairs, resampled within each slice: a pair file
may repeat a pair many times (the ProtoT paper's repeats synonym pairs 7x on average), and a bootstrap over lines
would overstate the sample size that much. Point estimates still count every line; a metric's ``n`` is the number
of unique pairs; the run's info records lines and unique pairs per slice, and an imported file's duplicate rate is
printed. Every statistic of a slice uses the same cluster draws (:class:`SliceClusters`: exactly the draws and
replicates of :func:`harness.stats.cluster_bootstrap` for the same seed, computed from per-pair sums in one
vectorised step instead of its per-replicate loop, which costs ~100 s at the default size), so the aggregates
(mean / worst / sensitivity over slices) reduce the slices' replicates draw by draw. See docs/faithfulness.md.

The score is ``selectivity`` (:mod:`suites.robustness.selectivity`, docs/controls.md): on sentences that have
both kinds of edit, how often a meaning-changing edit moves the final prediction more than a meaning-preserving
one; a model that ignores its context scores 0, the worst. Raw change (``jsd_final/mean`` and the rest) is a
diagnostic: a context-free model changes by exactly 0 and would win it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.config import as_tuple
from harness.kit import SPLITS, cache_dir
from harness.errors import ConfigError
from harness.registry import register_suite
from harness.stats import Interval, percentile_interval, resample_indices
from harness.suite import Metric, Suite, SuiteContext, SuiteResult
from harness.values import option
from suites.robustness.pairs import Pair, PairSetSpec, cached_pairs, duplicate_counts, load_pairs, pair_key
from suites.robustness.perturbations import PERTURBATIONS, check_names
from suites.robustness.scoring import DISTANCE_BUCKETS, Scores, bucket_name, score_pairs
from suites.robustness.selectivity import selectivity_metrics

HELD_OUT = tuple(s for s in SPLITS if s != "train")
DEFAULT_SLICES = tuple(PERTURBATIONS)


@dataclass(frozen=True)
class RobustnessConfig:
    """The default (4,500 pairs, about 200k tokens of forward passes) scores a quick-preset model in 20-40 s on the
    2-core CPU once the pair set is cached; tests use a few pairs per slice."""

    slices: tuple[str, ...] = DEFAULT_SLICES  # perturbation families to build pairs for
    pairs_per_slice: int = option(500, "pairs built per perturbation family", min=1)
    splits: tuple[str, ...] = option(HELD_OUT, choices=HELD_OUT)  # held-out splits the sentences come from
    min_words: int = option(6, "shortest sentence used, in words", min=1)
    max_words: int = option(30, "longest sentence used, in words", min=1)
    max_edits: int = option(1, min=1)  # edits per sentence (gender and number flip every site)
    pairs_file: str = ""  # a user's {slice, original, perturbed} JSONL, scored instead of built pairs
    top_k: int = option(10, "k of the top-k overlap of next-token predictions", min=2)
    batch_size: int = option(64, min=2)  # distinct sentences per forward pass
    bootstrap: int = option(1000, "bootstrap resamples of pairs for the CIs", min=0)
    confidence: float = option(0.95, "level of the confidence intervals", min=0.5, lt=1)
    samples_per_slice: int = option(10, min=0)  # example pairs with their numbers kept in the results
    seed: int = option(0, "seed of pair building and resampling", min=0)

    def __post_init__(self) -> None:
        for name in ("slices", "splits"):
            object.__setattr__(self, name, as_tuple(getattr(self, name), str, f"robustness: {name}"))
        check_names(self.slices, "slices")
        if not self.slices and not self.pairs_file:
            raise ConfigError("robustness: slices is empty; name at least one perturbation or give pairs_file.")
        bad = [s for s in self.splits if s not in HELD_OUT]
        if bad or not self.splits:
            raise ConfigError(
                f"robustness: splits must be held-out splits among {', '.join(HELD_OUT)}, got {list(self.splits)}."
            )
        if self.pairs_per_slice < 1 or self.max_edits < 1 or self.batch_size < 2:
            raise ConfigError("robustness: pairs_per_slice and max_edits must be >= 1 and batch_size >= 2.")
        if not 1 <= self.min_words <= self.max_words:
            raise ConfigError(
                f"robustness: need 1 <= min_words <= max_words, got {self.min_words} and {self.max_words}."
            )
        if self.top_k < 2:
            raise ConfigError(f"robustness: top_k must be >= 2 (top-1 agreement is reported anyway), got {self.top_k}.")
        if self.bootstrap < 0 or self.samples_per_slice < 0:
            raise ConfigError("robustness: bootstrap and samples_per_slice must be >= 0.")
        if not 0.5 <= self.confidence < 1:
            raise ConfigError(f"robustness: confidence must be in [0.5, 1), got {self.confidence}.")

    @property
    def pair_spec(self) -> PairSetSpec:
        return PairSetSpec(
            self.slices, self.pairs_per_slice, self.splits, self.min_words, self.max_words, self.max_edits, self.seed
        )


@dataclass(frozen=True)
class Stat:
    """A per-slice statistic: transform(sum of num / sum of den) over the slice's pairs (NaN entries left out)."""

    name: str
    num: Callable[[Scores], np.ndarray]
    den: Callable[[Scores], np.ndarray]
    higher_is_better: bool  # on robustness slices
    unit: str
    transform: Callable[[np.ndarray], np.ndarray] = lambda x: x
    change: bool = True  # a measure of change: its direction flips on sensitivity slices
    aggregate: bool = True  # also reported as mean / worst / sensitivity over slices


def _mean_of(field: str) -> tuple[Callable, Callable]:
    def num(s: Scores) -> np.ndarray:
        return np.nan_to_num(getattr(s, field), nan=0.0)

    def den(s: Scores) -> np.ndarray:
        return np.isfinite(getattr(s, field)).astype(float)

    return num, den


def stats(top_k: int, routing: bool) -> list[Stat]:
    out = [
        Stat("jsd_final", *_mean_of("jsd_final"), False, "bits"),
        Stat("jsd_after", *_mean_of("jsd_after"), False, "bits"),
        Stat(f"top{top_k}", *_mean_of("topk"), True, "fraction"),
        Stat("spearman", *_mean_of("spearman"), True, "correlation"),
        Stat("top1", *_mean_of("top1"), True, "fraction"),
        Stat(
            "dppl", lambda s: s.nll_delta, lambda s: s.suffix_tokens.astype(float), False, "relative", np.expm1, False
        ),
    ]
    for b, (lo, hi) in enumerate(DISTANCE_BUCKETS):
        out.append(
            Stat(
                f"jsd_{bucket_name(lo, hi)}",
                lambda s, b=b: s.dist_sum[:, b],
                lambda s, b=b: s.dist_count[:, b].astype(float),
                False,
                "bits",
                aggregate=False,
            )
        )
    if routing:
        out += [
            Stat("route_write", *_mean_of("route_write"), False, "bits"),
            Stat("route_read", *_mean_of("route_read"), False, "bits"),
        ]
    return out



@register_suite("robustness", config=RobustnessConfig)
class Robustness(Suite):
    #: uses logits, generate and the context only: scores external transformers models too (docs/huggingface.md)
    external: ClassVar[bool] = True
    #: 200 pairs per slice instead of 500: the per-slice CIs stay usable and the suite takes ~10-15 s per mixer
    #: 80 pairs per slice (9 slices, 720 pairs; 200 took 7-17 s per quick-preset model, 120 took 8-28 s on one
    #: thread beside another model): intervals widen by about sqrt(200/80) = 1.6x
    quickstart: ClassVar[dict[str, Any] | None] = {"pairs_per_slice": 80}
    #: 2: intervals cluster over unique pairs; dppl's NLL terms in float64. 3: the score is ``selectivity`` (flips
    #: against keeps on the same sentences, :mod:`suites.robustness.selectivity`); raw change is a diagnostic
    version: ClassVar[int] = 3
    headline: ClassVar[tuple[str, ...]] = (
        "selectivity", "change_ratio", "jsd_final/mean", "jsd_final/worst", "jsd_after/mean", "top10/mean", "spearman/mean", "top1/mean",
        "top1/worst", "dppl/mean", "route_write/mean", "jsd_final/sensitivity",
    )  # fmt: skip

    @classmethod
    def site_section(cls, runs, kit) -> str:
        from suites.robustness.site import site_section

        return site_section(runs, kit)

    def validate(self, model) -> None:
        if self.cfg.pairs_file and not Path(self.cfg.pairs_file).expanduser().is_file():
            raise ConfigError(
                f"robustness: pairs_file {self.cfg.pairs_file} does not exist; give a JSONL file of pairs."
            )
        if self.cfg.top_k > model.config.vocab_size:
            raise ConfigError(f"robustness: top_k {self.cfg.top_k} exceeds the vocabulary ({model.config.vocab_size}).")

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        cfg = self.cfg
        if cfg.pairs_file:
            pairs, source = load_pairs(cfg.pairs_file), Path(cfg.pairs_file).expanduser()
        else:
            pairs, source = cached_pairs(ctx.corpus.documents, cfg.pair_spec, cache_dir(), ctx.progress)
        if not pairs:
            raise ConfigError(
                f"robustness: no pairs could be built from {list(cfg.splits)}; use other splits or slices."
            )
        counts = duplicate_counts(pairs)
        if cfg.pairs_file:
            _print_duplicates(source, counts)
        scores = score_pairs(model, ctx.corpus.tokenizer, pairs, cfg.batch_size, cfg.top_k, ctx.progress)
        slices = list(dict.fromkeys(p.slice for p in pairs))
        kinds = {s: PERTURBATIONS[s].kind if s in PERTURBATIONS else "robustness" for s in slices}
        metrics, worst = self._metrics(pairs, scores, slices, kinds)
        selective, matched = selectivity_metrics(pairs, scores.jsd_final, scores.scored, kinds, cfg.bootstrap,
                                                 cfg.confidence, cfg.seed)
        info = {
            "selectivity": matched,
            "pairs": {
                "source": str(source),
                "built": not cfg.pairs_file,
                "per_slice": {s: int(sum(1 for p in pairs if p.slice == s)) for s in slices},
                "unique_per_slice": {s: c["unique"] for s, c in counts["per_slice"].items()},
                "duplicates": counts,
                "scored": int(scores.scored.sum()),
                "skipped_longer_than_context": int((~scores.scored).sum()),
            },
            "robustness_slices": [s for s in slices if kinds[s] == "robustness"],
            "sensitivity_slices": [s for s in slices if kinds[s] == "sensitivity"],
            "distance_buckets": [bucket_name(lo, hi) for lo, hi in DISTANCE_BUCKETS],
            "routing": scores.routing,
            "worst_family": worst,
        }
        return SuiteResult(metrics=selective + metrics, samples=self._samples(pairs, scores, slices, kinds, ctx),
                           info=info)

    # ------------------------------------------------------------------------------------------- metrics
    def _metrics(self, pairs: list[Pair], scores: Scores, slices, kinds) -> tuple[list[Metric], dict[str, str]]:
        cfg = self.cfg
        keys = np.asarray([pair_key(p) for p in pairs])
        members = {
            s: np.flatnonzero([p.slice == s and ok for p, ok in zip(pairs, scores.scored, strict=True)]) for s in slices
        }
        metrics: list[Metric] = []
        worst_of: dict[str, str] = {}
        clusters = {s: SliceClusters.of(keys[m], cfg.bootstrap, (cfg.seed, i))  # per slice, shared by every stat
                    for i, (s, m) in enumerate(members.items())}
        for stat in stats(cfg.top_k, scores.routing):
            num, den = stat.num(scores), stat.den(scores)
            values, reps, counts = {}, {}, {}
            for s in slices:
                m = members[s]
                counts[s] = len(set(keys[m][den[m] > 0]))  # unique pairs behind the number
                if den[m].sum() <= 0:
                    continue
                values[s] = float(stat.transform(num[m].sum() / den[m].sum()))
                interval = None
                replicates = clusters[s].replicates(num[m], den[m], stat.transform)
                if replicates is not None:
                    reps[s] = replicates
                    interval = _clustered(percentile_interval(replicates, cfg.confidence))
                better = stat.higher_is_better != (stat.change and kinds[s] == "sensitivity")
                metrics.append(Metric(f"{stat.name}/{s}", values[s], better, interval=interval, n=counts[s],
                                      unit=stat.unit))
            if stat.aggregate:
                metrics += self._aggregates(stat, values, reps, counts, kinds, worst_of)
        return metrics, worst_of

    def _aggregates(self, stat: Stat, values, reps, counts, kinds, worst_of) -> list[Metric]:
        out = []
        robust = [s for s in values if kinds[s] == "robustness"]
        sensitive = [s for s in values if kinds[s] == "sensitivity"]
        pick_worst = np.min if stat.higher_is_better else np.max
        for label, chosen, reduce, better in (
            ("mean", robust, np.mean, stat.higher_is_better),
            ("worst", robust, pick_worst, stat.higher_is_better),
            ("sensitivity", sensitive, np.mean, stat.higher_is_better != stat.change),
        ):
            if not chosen:
                continue
            value = float(reduce([values[s] for s in chosen]))
            interval = None
            if all(s in reps for s in chosen):
                interval = _clustered(percentile_interval(reduce(np.stack([reps[s] for s in chosen]), axis=0),
                                                          self.cfg.confidence))
            # raw change is a diagnostic: ignoring the context minimises it (a context-free model changes by 0);
            # the score is selectivity (suites/robustness/selectivity.py)
            out.append(Metric(f"{stat.name}/{label}", value, better, interval=interval,
                              n=sum(counts[s] for s in chosen), unit=stat.unit))
            if label == "worst":
                worst_of[stat.name] = next(s for s in chosen if values[s] == value)
        return out

    # ------------------------------------------------------------------------------------------- samples
    def _samples(self, pairs: list[Pair], scores: Scores, slices, kinds, ctx: SuiteContext) -> list[dict]:
        """The first pairs of each slice with their numbers; texts are stored raw (escaped when rendered)."""
        decode = ctx.corpus.tokenizer.decode
        out = []
        for s in slices:
            shown = [i for i, p in enumerate(pairs) if p.slice == s and scores.scored[i]][: self.cfg.samples_per_slice]
            for i in shown:
                p = pairs[i]
                out.append(
                    {
                        "slice": s,
                        "kind": kinds[s],
                        "id": p.id,
                        "original": p.original,
                        "perturbed": p.perturbed,
                        "edits": [e.to_json() for e in p.edits],
                        **{
                            name: _number(getattr(scores, field)[i])
                            for name, field in (
                                ("jsd_final", "jsd_final"),
                                ("jsd_after", "jsd_after"),
                                (f"top{self.cfg.top_k}", "topk"),
                                ("spearman", "spearman"),
                                ("top1", "top1"),
                                ("route_write", "route_write"),
                                ("route_read", "route_read"),
                            )
                        },
                        "dppl": _number(math.expm1(scores.nll_delta[i] / scores.suffix_tokens[i]))
                        if scores.suffix_tokens[i]
                        else None,
                        "next_original": [[decode([t]), round(pr, 6)] for t, pr in scores.next_original[i]],
                        "next_perturbed": [[decode([t]), round(pr, 6)] for t, pr in scores.next_perturbed[i]],
                    }
                )
        return out


@dataclass(frozen=True)
class SliceClusters:
    """A slice's unique pairs and the bootstrap draws over them, shared by every statistic of the slice.

    The draws are ``resample_indices(k, n_resamples, seed)`` over the sorted unique keys, which is what
    :func:`harness.stats.cluster_bootstrap` draws for the same seed; a statistic sum(num) / sum(den) of a
    resample is then the same sum over per-pair totals (tested against ``cluster_bootstrap``)."""

    inverse: np.ndarray  # the unique pair of each line
    k: int
    draws: np.ndarray | None  # [n_resamples, k]; None with fewer than 2 unique pairs or no resamples

    @staticmethod
    def of(keys: np.ndarray, n_resamples: int, seed) -> SliceClusters:
        unique, inverse = np.unique(np.asarray([str(k) for k in keys]), return_inverse=True)
        k = len(unique)
        draws = resample_indices(k, n_resamples, seed) if k >= 2 and n_resamples > 0 else None
        return SliceClusters(inverse, k, draws)

    def replicates(self, num: np.ndarray, den: np.ndarray, transform: Callable = lambda x: x) -> np.ndarray | None:
        """transform(sum num / sum den) per resample of unique pairs (each bringing all its lines)."""
        if self.draws is None:
            return None
        n = np.bincount(self.inverse, num, minlength=self.k)[self.draws].sum(1)
        d = np.bincount(self.inverse, den, minlength=self.k)[self.draws].sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return transform(n / d)


def _clustered(interval: Interval | None) -> Interval | None:
    """The percentile interval of an aggregate of cluster-bootstrap replicates is a cluster-bootstrap interval."""
    return None if interval is None else dataclasses.replace(interval, kind="cluster-bootstrap")


def _print_duplicates(source: Path, counts: dict) -> None:
    """The duplicate rate of an imported pair file, on stderr (it is also recorded in the run's info)."""
    total = counts["total"]
    per_slice = ", ".join(f"{s} {c['unique']}/{c['lines']}" for s, c in counts["per_slice"].items())
    print(f"[robustness] {source.name}: {total['lines']} lines, {total['unique']} unique pairs (duplicate rate "
          f"{total['duplicate_rate']:.1%}; unique/lines per slice: {per_slice}); intervals resample unique pairs.",
          file=sys.stderr, flush=True)


def _number(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)
