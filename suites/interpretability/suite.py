"""The interpretability suite: runs the parts named in the config and turns them into metrics, samples and plots.

Unit sets and metric suffixes: the model's own units (no suffix: ProtoT prototypes, attention heads, Mamba
channels/heads, DeltaNet heads), ``_null`` (the same mixer's units in the untrained model this checkpoint started
from, seeded like training), ``_sae_var`` / ``_sae_freq`` (top-k SAE features on the model's residual stream, the
``sae_units`` features of largest activation variance / firing frequency, the paper's two SAE rows).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from harness.kit import build_model, load_model
from harness.errors import ConfigError
from harness.mixer import Unit
from harness.registry import register_suite
from harness import stats
from harness.stats import Interval
from harness.suite import ItemValues, Metric, Suite, SuiteContext, SuiteResult
from suites.interpretability import basis as basis_mod
from suites.interpretability import (
    cards,
    coverage,
    interventions,
    judge,
    scores,
    tokenspace,
    toy,
)
from suites.interpretability.activations import UnitSet, unit_activations
from suites.interpretability.config import InterpConfig, parse_unit
from suites.interpretability.embedding import SentenceEmbedder
from suites.interpretability.profiles import UnitProfile, build_profiles, read_write_lag
from suites.interpretability.sae import train_sae
from suites.interpretability.windows import (
    basis_windows,
    concept_families,
    held_out_windows,
    top_vocabulary,
)

SUFFIX = {"units": "", "null": "_null", "sae_var": "_sae_var", "sae_freq": "_sae_freq"}
#: the mixer's own units' judge-free scores are what ranks mixers; the null model's are the floor they must beat
SCORES = ("coherence", "themes", "coverage")
#: the unit metrics a model without units (a control, docs/controls.md) reports as n/a (NaN), with their directions:
#: it has no units, which is not the same as units that score zero
UNIT_HEADLINES = {"coherence": True, "themes": False, "token_entropy": False, "coverage": True, "dead_frac": False,
                  "dprob_mean/target": False}


def _role(name: str) -> str:
    if name in SCORES:
        return "score"
    if name.endswith(SUFFIX["null"]):
        return "baseline"
    return "diagnostic"


@register_suite("interpretability", config=InterpConfig)
class Interpretability(Suite):
    #: judge-free metrics and one intervention, <= 45 s per quick-preset mixer on the 2-core CPU
    quickstart: ClassVar[dict[str, Any] | None] = {
        "parts": "units,null,coverage,interventions",
        "intervene_modes": "write-mask,mask",
        "profile_tokens": 2048,
        "intervene_tokens": 2048,
        "concept_windows": 8,
        "max_units_per_layer": 16,
    }
    #: 2: basis/toy in the paper's convention, key-query in its orientation; 3: a random-unit intervention and the
    #: intervention metrics with intervals (dprob_interval/target, dprob_gap/random, dppl_interval/target); 4:
    #: coverage at an equal number of units per model, with items and an interval, and scores naming their null
    version: ClassVar[int] = 4
    headline: ClassVar[tuple[str, ...]] = (
        "coherence", "themes", "token_entropy", "coverage", "dead_frac", "dprob_mean/target",
    )

    @classmethod
    def site_section(cls, runs, kit) -> str:
        from suites.interpretability.site import site_section

        return site_section(runs, kit)

    def validate(self, model) -> None:
        cfg = self.cfg
        if cfg.window > model.config.context:
            raise ConfigError(
                f"interpretability: window={cfg.window} is longer than the model's context {model.config.context}."
            )
        for name in ("target_unit", "complement_unit", "neutral_unit"):
            unit = parse_unit(getattr(cfg, name))
            if unit is not None and unit[0] >= model.config.n_layers:
                raise ConfigError(f"interpretability: {name} names layer {unit[0]}; the model has "
                                  f"{model.config.n_layers} layers.")
        modes = model.mixers[0].intervention_modes
        if cfg.has("interventions") and cfg.intervene_modes and modes and not set(cfg.intervene_modes) & set(modes):
            raise ConfigError(
                f"interpretability: intervene_modes {list(cfg.intervene_modes)} include none of the modes mixer "
                f"'{model.spec.mixer}' supports ({', '.join(modes)})."
            )

    def run(self, model, ctx: SuiteContext) -> SuiteResult:
        return _Run(self.cfg, model, ctx).execute()


class _Run:
    """One suite run: the state the parts share (windows, unit sets, profiles) and what they report."""

    def __init__(self, cfg: InterpConfig, model, ctx: SuiteContext):
        self.cfg, self.model, self.ctx = cfg, model.eval(), ctx
        self.tok = ctx.corpus.tokenizer
        self.device = next(model.parameters()).device
        self.metrics: list[Metric] = []
        self.samples: list[dict] = []
        self.plots: list[Path] = []
        self.info: dict = {"parts": list(cfg.parts), "timings_s": {}, "skipped": {}}
        self.sets: dict[str, UnitSet] = {}
        self.profiles: dict[str, list[UnitProfile]] = {}
        self.gates = None
        self.sae = None
        self.intervention_rows: list[interventions.InterventionRow] = []
        self._t0 = time.perf_counter()

    # ------------------------------------------------------------------ driver
    def execute(self) -> SuiteResult:
        cfg = self.cfg
        needs_units = any(cfg.has(p) for p in ("units", "coverage", "interventions"))
        if needs_units or cfg.has("null") or cfg.has("sae"):
            self._stage("profile windows", self._profile_windows)
        if needs_units:
            self._stage("units", self._own_units)
        if cfg.has("null"):
            self._stage("null model", self._null_units)
        if cfg.has("sae"):
            self._stage("sae", self._sae_units)
        if self.profiles:
            self._stage("scores", self._scores)
        if cfg.judge_url and self.profiles:
            self._stage("judge", self._judge)
        if cfg.has("coverage") and self.sets:
            self._stage("coverage", self._coverage)
        if cfg.has("interventions") and "units" in self.profiles:
            self._stage("interventions", self._interventions)
        if cfg.has("basis"):
            self._stage("basis", self._basis)
        if cfg.has("toy"):
            self._stage("toy", self._toy)
        if self.profiles or self.intervention_rows:
            self._cards()
        self.info["timings_s"]["total"] = round(time.perf_counter() - self._t0, 2)
        return SuiteResult(self.metrics, self.samples, self.plots, self.info)

    def _stage(self, name: str, fn) -> None:
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        self.info["timings_s"][name] = round(seconds, 2)
        if self.ctx.progress:
            print(f"[interpretability] {name}: {seconds:.1f} s", file=sys.stderr, flush=True)

    def _skip(self, what: str, reason: str) -> None:
        self.info["skipped"][what] = reason

    def _metric(self, name: str, value: float, higher: bool, unit: str = "", n: int | None = None,
                interval: Interval | None = None, **extra: Any) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        if name in SCORES:  # the untrained model of the same architecture is the null a score must beat
            extra.setdefault("null", name + SUFFIX["null"])
        self.metrics.append(Metric(name, float(value), higher, role=_role(name), interval=interval, n=n, unit=unit,
                                   **extra))

    # ------------------------------------------------------------------ units
    def _profile_windows(self) -> None:
        cfg = self.cfg
        self.profile_ids = held_out_windows(self.ctx.corpus, cfg.profile_splits, cfg.window, cfg.profile_tokens)
        self.profile_inputs = self.profile_ids[:, :-1]
        self.info["profile_windows"] = {"n": len(self.profile_ids), "tokens": int(self.profile_inputs.numel()),
                                        "splits": list(cfg.profile_splits)}

    def _profile(self, unit_set: UnitSet) -> None:
        cfg = self.cfg
        self.sets[unit_set.name] = unit_set
        self.profiles[unit_set.name] = build_profiles(
            unit_set, self.profile_inputs, self.tok, cfg.n_contexts, cfg.context_left, cfg.context_right,
            cfg.top_positions, cfg.dead_threshold,
        )

    def _own_units(self) -> None:
        unit_set, self.gates, reason = unit_activations(
            self.model, self.profile_inputs.to(self.device), "units", self.cfg.max_units_per_layer)
        if unit_set is None:
            self._skip("units", reason)
            self.metrics += [Metric(name, math.nan, higher, role=_role(name), unit=f"n/a: {reason}")
                             for name, higher in UNIT_HEADLINES.items()]
            return
        self._profile(unit_set)
        self.info["unit_definition"] = unit_set.definition
        self.info["units_profiled"] = len(unit_set.units)
        self.info["units_total"] = sum(len(m.units()) for m in self.model.mixers)
        if self.gates is not None:
            lags = read_write_lag(self.gates)
            for p in self.profiles["units"]:
                if (p.layer, p.index) in lags:
                    p.attrs["rw_lag"], p.attrs["rw_lag_corr"] = lags[(p.layer, p.index)]
            if lags:
                values = np.array([lag for lag, _ in lags.values()])
                self._metric("rw_lag_plus1_frac", float((values == 1).mean()), True, "fraction", len(values))
                self._metric("rw_lag_median", float(np.median(values)), True, "tokens", len(values))
        half = [p.attrs["half_life"] for p in self.profiles["units"] if math.isfinite(p.attrs.get("half_life", math.nan))]
        if half:
            self._metric("half_life_median", float(np.median(half)), True, "tokens", len(half))

    def _null_units(self) -> None:
        self.null_model = self._init_model()
        unit_set, _, reason = unit_activations(
            self.null_model, self.profile_inputs.to(self.device), "null", self.cfg.max_units_per_layer)
        if unit_set is None:
            self._skip("null", reason)
            return
        self._profile(unit_set)

    def _init_model(self):
        """The untrained model this checkpoint started from: the training seed builds the same initial weights."""
        init = build_model(self.model.spec, seed=self.ctx.seed).to(self.device).eval()
        for untrained, trained in zip(init.mixers, self.model.mixers):  # a hybrid's layers run different kernels
            untrained.set_kernel(trained.kernel)
        return init

    def _sae_units(self) -> None:
        cfg = self.cfg
        layer = cfg.sae_layer if cfg.sae_layer >= 0 else self.model.config.n_layers // 2
        if layer > self.model.config.n_layers:
            raise ConfigError(f"interpretability: sae_layer={layer} is past the last block "
                              f"({self.model.config.n_layers}).")
        n_windows = max(1, cfg.sae_tokens // self.model.config.context)
        train_ids = torch.stack([
            self.ctx.corpus.train_batch(i, 1, self.model.config.context, cfg.seed + 1)[0, :-1] for i in range(n_windows)
        ])
        x = self._residual(train_ids, layer)
        self.sae = train_sae(x.reshape(-1, x.shape[-1]), cfg.sae_features, cfg.sae_k, cfg.sae_steps, cfg.seed)
        self.sae_layer = layer
        z = self._sae_codes(self.profile_inputs)  # [n, T, F]
        held = self._residual(self.profile_inputs, layer)
        fvu = self.sae.fraction_of_variance_unexplained(held.reshape(-1, held.shape[-1]))
        flat = z.reshape(-1, z.shape[-1])
        variance, frequency = flat.var(0), (flat > 0).float().mean(0)
        self._metric("sae_fvu", fvu, False, "fraction", flat.shape[0])
        self._metric("sae_dead_frac", float((frequency == 0).float().mean()), False, "fraction", flat.shape[1])
        self.info["sae"] = {"layer": layer, "features": cfg.sae_features, "k": cfg.sae_k, "steps": cfg.sae_steps,
                            "train_tokens": int(train_ids.numel()), "fvu_heldout": fvu}
        for name, key in (("sae_var", variance), ("sae_freq", frequency)):
            chosen = key.topk(cfg.sae_units).indices.tolist()
            units = [Unit(layer, f, "SAE feature", {"variance": float(variance[f]), "frequency": float(frequency[f])})
                     for f in chosen]
            self._profile(UnitSet(name, "SAE feature", "sae", units, z[..., chosen]))

    @torch.no_grad()
    def _residual(self, ids: torch.Tensor, layer: int) -> torch.Tensor:
        out = [self.model.hidden_states(ids[s : s + 32].to(self.device))[layer].float().cpu()
               for s in range(0, len(ids), 32)]
        return torch.cat(out)

    @torch.no_grad()
    def _sae_codes(self, ids: torch.Tensor) -> torch.Tensor:
        return self.sae.encode(self._residual(ids, self.sae_layer))

    # ------------------------------------------------------------------ scores
    def _scores(self) -> None:
        cfg = self.cfg
        embedder = self.embedder = SentenceEmbedder()
        rng = np.random.default_rng(cfg.seed)
        eligible = (self.profile_inputs != self.tok.eos_id) & (self.profile_inputs != self.tok.pad_id)
        eligible[:, : cfg.context_left] = False  # as for units' contexts (profiles.py)
        positions = eligible.nonzero().numpy()
        coh, themes = [], []
        for _ in range(cfg.random_sets):
            texts = []
            for w, t in positions[rng.choice(len(positions), size=cfg.n_contexts, replace=False)]:
                row = self.profile_inputs[w].tolist()
                texts.append(self.tok.decode(row[max(0, t - cfg.context_left) : t + 1]))
            emb = embedder.embed(texts)
            coh.append(scores.coherence(emb))
            themes.append(scores.n_themes(emb, cfg.themes_distance))
        self._summary("coherence_random", coh, True, "cosine")
        self._summary("themes_random", themes, False, "clusters")
        for name, profiles in self.profiles.items():
            sfx = SUFFIX[name]
            for p in profiles:
                if len(p.contexts) >= 2:
                    emb = embedder.embed([c.seen for c in p.contexts])
                    p.scores["coherence"] = scores.coherence(emb)
                    p.scores["themes"] = float(scores.n_themes(emb, cfg.themes_distance))
            live = [p for p in profiles if not p.dead]
            self._summary(f"coherence{sfx}", [p.scores.get("coherence", math.nan) for p in live], True, "cosine")
            self._summary(f"themes{sfx}", [p.scores.get("themes", math.nan) for p in live], False, "clusters")
            self._summary(f"token_entropy{sfx}", [p.token_entropy for p in live], False, "bits")
            self._metric(f"dead_frac{sfx}", float(np.mean([p.dead for p in profiles])), False, "fraction",
                         len(profiles))

    def _summary(self, name: str, values, higher: bool, unit: str) -> None:
        s = scores.summarise(values, self.cfg.bootstrap, self.cfg.seed)
        if s.n:
            self._metric(name, s.mean, higher, unit, s.n, s.interval)
            self._metric(f"{name}_sd", s.sd, False, unit, s.n)

    def _judge(self) -> None:
        cfg = self.cfg
        with judge.endpoint_asker(cfg.judge_url, cfg.judge_model, self.ctx.progress) as ask:
            failed = 0
            for name, profiles in self.profiles.items():
                live = [p for p in profiles if not p.dead]
                chosen = live[: cfg.judge_units] if cfg.judge_units else live
                failed += judge.judge_profiles(chosen, ask)
                sfx = SUFFIX[name]
                for key, higher in (("disentanglement", True), ("coverage", True), ("themes", False)):
                    self._summary(f"judge_{key}{sfx}", [p.scores.get(f"judge_{key}", math.nan) for p in chosen],
                                  higher, "score")
        self.info["judge"] = {"url": cfg.judge_url, "model": cfg.judge_model, "template": judge.TEMPLATE_HASH,
                              "unparsed_replies": failed}

    # ------------------------------------------------------------------ coverage
    def _coverage(self) -> None:
        cfg = self.cfg
        families = concept_families(self.ctx.corpus, cfg.concept_windows, cfg.concept_window, cfg.era_bounds, cfg.seed)
        if not families:
            self._skip("coverage", "the corpus carries no Brown genre or SOTU year labels")
            return
        self.info["coverage"] = {f.name: {"concepts": list(f.concepts), "windows": len(f.ids)} for f in families}
        k = cfg.coverage_units
        chosen = {name: self._coverage_subset(len(s.units)) for name, s in self.sets.items()}
        self.info["coverage_units"] = {name: len(idx) for name, idx in chosen.items() if idx is not None}
        per_set: dict[str, list[tuple[str, float, float]]] = {}  # (concept id, correlation, weight)
        for fam in families:
            values = self._window_means(fam.ids)
            for name, vals in values.items():
                idx = chosen[name]
                if idx is None:
                    continue
                corr = coverage.correlations(vals[:, idx], fam.labels, len(fam.concepts))
                cov = coverage.hungarian_coverage(corr)
                sfx = SUFFIX[name]
                self._metric(f"coverage_{fam.name}{sfx}", cov.mean, True, "correlation", len(fam.concepts), units=k)
                self._metric(f"coverage_{fam.name}{sfx}_sd", cov.sd, False, "correlation", len(fam.concepts))
                per_set.setdefault(name, []).extend(
                    (f"{fam.name}/{c}", float(cov.per_concept[i]), 1.0 / len(fam.concepts))
                    for i, c in enumerate(fam.concepts))
                units = self.sets[name].units
                self.samples.append({"kind": "coverage", "unit_set": name, "family": fam.name, "concepts": [
                    {"concept": c, "correlation": float(cov.per_concept[i]),
                     "unit": None if cov.unit_of[i] < 0 else self._label(units[idx[cov.unit_of[i]]], name)}
                    for i, c in enumerate(fam.concepts)
                ]})
        for name, idx in chosen.items():
            if idx is None:
                self._skip(f"coverage{SUFFIX[name]}", f"{len(self.sets[name].units)} units, fewer than the "
                           f"{k} every model's coverage is computed over (coverage_units)")
                if name == "units":
                    self.metrics.append(Metric("coverage", math.nan, True, role="score", null="coverage_null",
                                               unit=f"n/a: fewer than {k} units"))
        for name, parts in per_set.items():
            ids, values, weights = zip(*parts)
            res = stats.bootstrap((np.array(values) * np.array(weights), np.array(weights)),
                                  lambda v, w, axis=-1: np.sum(v, axis=axis) / np.sum(w, axis=axis),
                                  n_resamples=cfg.bootstrap, seed=cfg.seed)
            self._metric(f"coverage{SUFFIX[name]}", res.point, True, "correlation", len(ids), res.interval,
                         units=k, items=ItemValues(ids, values, weights))

    def _coverage_subset(self, n_units: int) -> np.ndarray | None:
        """The same ``coverage_units`` of a unit set's units for every model (seeded), or None with fewer."""
        k = self.cfg.coverage_units
        if n_units < k:
            return None
        return np.sort(np.random.default_rng([self.cfg.seed, 7]).choice(n_units, size=k, replace=False))

    def _label(self, unit: Unit, set_name: str) -> str:
        return next(p.label for p in self.profiles[set_name] if (p.layer, p.index) == (unit.layer, unit.index))

    def _window_means(self, ids: torch.Tensor) -> dict[str, np.ndarray]:
        """Each unit set's mean activation per window of ``ids``: {set name: [n_windows, units]}."""
        out = {}
        for name, unit_set in self.sets.items():
            if unit_set.definition == "sae":
                acts = self._sae_codes(ids)[..., [u.index for u in unit_set.units]]
            else:
                model = self.model if name == "units" else self.null_model
                acts = unit_activations(model, ids.to(self.device), name, self.cfg.max_units_per_layer)[0].acts
            out[name] = acts.mean(1).numpy()
        return out

    # ------------------------------------------------------------------ interventions
    def _interventions(self) -> None:
        cfg = self.cfg
        mixer_modes = self.model.mixers[0].intervention_modes
        modes = [m for m in (cfg.intervene_modes or mixer_modes) if m in mixer_modes]
        if not modes:
            self._skip("interventions", f"mixer '{self.model.spec.mixer}' supports no interventions")
            return
        ids = held_out_windows(self.ctx.corpus, cfg.intervene_splits, self.model.config.context, cfg.intervene_tokens)
        ids = ids.to(self.device)
        next_counts = np.bincount(ids[:, 1:].reshape(-1).cpu().numpy(), minlength=self.tok.vocab_size)
        named = {role: parse_unit(getattr(cfg, f"{role}_unit")) for role in ("target", "complement", "neutral")}
        try:
            target_id, choices = interventions.choose_units(
                self.profiles["units"], self.sets["units"], self.profile_inputs, self.model, self.tok, next_counts,
                cfg.target, named, cfg.complement, cfg.seed)
        except interventions.NoConceptWord as exc:
            self._skip("interventions", str(exc))
            return
        word = self.tok.decode([target_id])
        base = interventions.baseline(self.model, ids, target_id, cfg.prompt_top_k, cfg.max_prompts, self.tok.pad_id)
        self.info["interventions"] = {"target": word, "modes": modes, "prompts": len(base.prompts),
                                      "windows": len(ids), "units": [c.__dict__ for c in choices]}
        for mode in modes:
            for choice in choices:
                row = interventions.intervene(self.model, ids, base, target_id, choice, mode, word)
                self.intervention_rows.append(row)
                self.samples.append({"kind": "intervention", **row.to_json()})
                tag = f"/{choice.role}" + ("" if mode == modes[0] else f"/{mode}")
                self._metric(f"dprob_mean{tag}", row.dprob_mean, False, "relative", row.n_prompts)
                self._metric(f"dprob_max{tag}", row.dprob_max, False, "relative", row.n_prompts)
                self._metric(f"dppl{tag}", row.dppl, False, "relative", int(base.valid.sum()))
                self._metric(f"dppl_max{tag}", row.dppl_max, False, "relative", len(ids))
        first = {r.role: r for r in self.intervention_rows if r.mode == modes[0]}
        if "neutral" in first:
            self._metric("dprob_selectivity", first["target"].dprob_mean - first["neutral"].dprob_mean, False,
                         "relative", first["target"].n_prompts)
        self._intervention_intervals(first, base)

    def _intervention_intervals(self, rows: dict, base) -> None:
        """The claims of docs/reproductions.md ("protot-intervention") with intervals, for every unit role (target,
        complement, neutral, random: a negative runs the claim on the random unit): the relative change of the word's
        probability (bootstrap over prompts, per-prompt values kept so two roles pair on the prompts), the target's
        change minus the random unit's, and the perplexity change of masking the unit (bootstrap over windows,
        token-weighted)."""
        target = rows.get("target")
        if target is None:
            return
        level, n_boot, seed = 0.95, 1000, self.cfg.seed
        ids = tuple(f"{int(w)}:{int(t)}" for w, t in base.prompts.tolist())
        mean = lambda d, axis=-1: d.mean(axis=axis)  # noqa: E731
        for role, row in rows.items():
            if len(row.dprob) >= 2:
                dprob = np.asarray(row.dprob)
                res = stats.bootstrap((dprob,), mean, n_resamples=n_boot, level=level, seed=seed)
                self.metrics.append(Metric(f"dprob_interval/{role}", res.point, False, role="diagnostic",
                                           interval=res.interval, n=len(dprob),
                                           unit=f"relative change of the word's probability, {role} unit masked",
                                           items=ItemValues(ids, tuple(dprob.tolist()))))
            if len(row.window_dnll) >= 2:
                dnll, tokens = np.asarray(row.window_dnll), np.asarray(row.window_tokens)
                keep = tokens > 0
                res = stats.bootstrap((dnll[keep], tokens[keep]),
                                      lambda d, t, axis=-1: np.expm1(d.sum(axis=axis) / t.sum(axis=axis)),
                                      n_resamples=n_boot, level=level, seed=seed)
                self.metrics.append(Metric(f"dppl_interval/{role}", res.point, False, role="diagnostic",
                                           interval=res.interval, n=int(keep.sum()),
                                           unit=f"relative perplexity change, masking the {role} unit"))
        if "random" in rows and len(target.dprob) >= 2:
            gap = np.asarray(target.dprob) - np.asarray(rows["random"].dprob)
            res = stats.bootstrap((gap,), mean, n_resamples=n_boot, level=level, seed=seed)
            self.metrics.append(Metric("dprob_gap/random", res.point, False, role="diagnostic", interval=res.interval,
                                       n=len(gap), unit="relative change, target unit - random unit",
                                       items=ItemValues(ids, tuple(gap.tolist()))))

    # ------------------------------------------------------------------ basis functions
    def _basis(self) -> None:
        """The Pythia protocol (:mod:`.tokenspace`) against the basis functions in ``basis_convention``.

        Key-query, two orientations of the theory side (docs/faithfulness.md): ``basis_kq_cos`` is the paper's
        (``pythia.py`` compares the model's query x key map E A E^T with the row covariance of its Q-bar, which
        is Q^T: rows = key token); ``basis_kq_query_cos`` compares it with Q itself (rows = query token, the
        orientation of the model's map)."""
        cfg = self.cfg
        vocab = top_vocabulary(self.ctx.corpus, cfg.basis_vocab)
        ids = basis_windows(self.ctx.corpus, vocab, cfg.basis_sequences, cfg.basis_len, cfg.seed)
        full_vocab = self.tok.vocab_size if cfg.basis_convention == "paper" else None
        b = basis_mod.basis_functions(ids, len(vocab), full_vocab=full_vocab)
        theory = {"resid": tokenspace.theory_covariance(b.value_term), "kq": tokenspace.theory_covariance(b.Q.T),
                  "kq_query": tokenspace.theory_covariance(b.Q), "bigram": tokenspace.theory_covariance(b.B),
                  "embedding": tokenspace.theory_covariance(b.B.T)}
        theory["mixer"] = theory["resid"]
        actual_of = {"resid": "resid", "mixer": "mixer", "kq": "kq", "kq_query": "kq"}  # per-layer map compared
        self.info["basis"] = {"vocab": len(vocab), "sequences": cfg.basis_sequences, "length": cfg.basis_len,
                              "convention": cfg.basis_convention, "full_vocab": full_vocab,
                              "oov_fraction": float((ids < 0).float().mean()),
                              "orientation": {"basis_kq_cos": "paper (pythia.py): theory Q^T, rows = key token",
                                              "basis_kq_query_cos": "theory Q, rows = query token"},
                              "neighbours": self._neighbours(b, vocab)}
        models = [("", self.model, None), ("_init", getattr(self, "null_model", None) or self._init_model(), 0)]
        for path in cfg.basis_checkpoints:
            other, ckpt = load_model(path, str(self.device))
            if ckpt.spec.model.to_json() != self.model.spec.to_json():
                raise ConfigError(f"interpretability: basis checkpoint {path} is not the same model as the one scored.")
            models.append((f"_step{ckpt.step}", other, ckpt.step))
        token_ids = torch.as_tensor(vocab).to(self.device)
        for sfx, model, step in models:
            maps, model_maps, reason = tokenspace.token_maps(model, token_ids)
            if reason:
                self._skip("basis_kq", reason)
            per_layer = {kind: [tokenspace.protocol_cosine(layer[actual].cpu(), theory[kind]) for layer in maps]
                         for kind, actual in actual_of.items() if actual in maps[0]}
            for kind, values in per_layer.items():
                self._metric(f"basis_{kind}_cos{sfx}", float(np.mean(values)), True, "cosine", len(values))
            whole = {kind: tokenspace.protocol_cosine(m.cpu(), theory[kind]) for kind, m in model_maps.items()}
            for kind, value in whole.items():
                self._metric(f"basis_{kind}_cos{sfx}", value, True, "cosine", len(vocab))
            self.samples.append({"kind": "basis", "model": sfx.lstrip("_") or "checkpoint", "step": step,
                                 "convention": cfg.basis_convention, "per_layer": per_layer,
                                 **{f"{k}_cos": v for k, v in whole.items()}})

    def _neighbours(self, b: basis_mod.Basis, vocab: np.ndarray, words: int = 8, k: int = 5) -> dict:
        """The paper's qualitative check: for the most frequent content words of the basis vocabulary, their top
        tokens under B (next), Sigma (interchangeable: Sigma as a cosine, Sigma_ij / sqrt(Sigma_ii Sigma_jj), since
        the raw entries are frequency-weighted and would list the most frequent tokens for every word) and Phi (in
        the prefix)."""
        text = [self.tok.decode([int(t)]) for t in vocab]
        rows = [i for i, t in enumerate(text) if interventions.content_word(t)][:words]
        diag = b.Sigma.diagonal().clamp(min=1e-300).sqrt()
        sigma_cos = b.Sigma / diag[:, None] / diag[None, :]
        out = {}
        for i in rows:
            out[text[i]] = {
                name: [text[j] for j, _ in basis_mod.neighbours(m, i, k, exclude=i if name == "Sigma" else None)]
                for name, m in (("B", b.B), ("Sigma", sigma_cos), ("Phi", b.Phi))
            }
        return out

    # ------------------------------------------------------------------ toy reproduction
    def _toy(self) -> None:
        cfg = self.cfg
        data = toy.toy_data([d.text for d in self.ctx.corpus.documents["train"]], cfg.toy_vocab, cfg.toy_len,
                            cfg.toy_samples, cfg.seed, cfg.toy_max_oov, unk=cfg.basis_convention == "paper")
        b = basis_mod.basis_functions(data.ids, len(data.vocab))  # with UNK, no -1: both conventions agree
        self.info["toy"] = {"vocab": len(data.vocab), "convention": cfg.basis_convention, "length": cfg.toy_len,
                            "samples": cfg.toy_samples,
                            "chunks_available": data.chunks_available, "chunks_total": data.chunks_total,
                            "oov_fraction": data.oov_fraction, "steps": cfg.toy_steps, "lrs": list(cfg.toy_lrs)}
        runs = []
        for i, lr in enumerate(cfg.toy_lrs):
            run = toy.train_toy(data.ids, len(data.vocab), lr, cfg.toy_steps, b)
            runs.append(run)
            sfx = "" if i == 0 else f"_lr{lr:g}"
            for name, short in (("W_O", "wo"), ("V", "v"), ("W", "w"), ("P", "p")):
                self._metric(f"toy_cos_{short}_min{sfx}", run.min_cos(name, cfg.toy_early_steps), True, "cosine",
                             cfg.toy_early_steps)
            self._metric(f"toy_loss_start{sfx}", run.steps[0]["loss"], False, "nats")
            self._metric(f"toy_loss_end{sfx}", run.steps[-1]["loss"], False, "nats")
            self.samples.extend({"kind": "toy_step", "lr": lr, **row} for row in run.steps)
        self.plots.append(toy.plot_runs(runs, self.ctx.work_dir / "toy_leading_terms.png"))

    # ------------------------------------------------------------------ cards
    def _cards(self) -> None:
        for profiles in self.profiles.values():
            self.samples.extend({**p.to_json(), "kind": "unit"} for p in profiles)
        titles = {"units": f"{self.model.spec.mixer} units", "null": "null model (untrained) units",
                  "sae_var": "SAE features (top variance)", "sae_freq": "SAE features (top frequency)"}
        notes = [(f"mixer {self.model.spec.mixer}; activation: {self.info.get('unit_definition', 'n/a')}; "
                  f"profile windows: {self.info.get('profile_windows')}")]
        path = Path(self.ctx.work_dir) / "unit_cards.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        cards.write_page(path, f"Unit cards: {self.model.spec.mixer}",
                         {titles[k]: v for k, v in self.profiles.items()}, self.intervention_rows, notes)
        self.plots.append(path)
