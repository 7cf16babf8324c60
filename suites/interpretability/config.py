"""The interpretability suite's configuration: one frozen dataclass, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from harness.kit import SPLITS
from harness.errors import ConfigError
from harness.values import option

#: how the basis functions and the toy treat tokens outside the top-k vocabulary (docs/faithfulness.md):
#: "paper" as the released scripts (centre by 1/|full vocabulary|, keep those positions; toy: one UNK token),
#: "top-k" the earlier convention (centre by 1/k, drop those targets; toy: zero input, ignored target)
BASIS_CONVENTIONS = ("paper", "top-k")
#: what a run can do; "toy" (minutes of CPU) is opt-in
PARTS = ("units", "null", "sae", "coverage", "interventions", "basis", "toy")
DEFAULT_PARTS = ("units", "null", "sae", "coverage", "interventions", "basis")
HELD_OUT = tuple(s for s in SPLITS if s != "train")


def _as_tuple(value) -> tuple:
    """Tuples from the CLI arrive as "a,b,c"."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (int, float)):
        return (value,)
    return tuple(value)


def parse_unit(text: str) -> tuple[int, int] | None:
    """``"2:7"`` (layer 2, unit 7) -> (2, 7); "" -> None."""
    if not text:
        return None
    try:
        layer, index = (int(v) for v in text.split(":"))
    except ValueError:
        raise ConfigError(f"interpretability: a unit is named LAYER:INDEX (e.g. 2:7), got '{text}'.") from None
    if layer < 0 or index < 0:
        raise ConfigError(f"interpretability: unit '{text}' has a negative layer or index.")
    return layer, index


@dataclass(frozen=True)
class InterpConfig:
    """Defaults score a quick-preset model in ~1-2 min on the 2-core CPU (``parts`` without "toy"); the quickstart
    (see suites/interpretability/__init__.py) keeps the judge-free metrics and one intervention in <= 45 s."""

    parts: tuple[str, ...] = option(DEFAULT_PARTS, "what to run (toy is opt-in: minutes of CPU)", choices=PARTS)
    seed: int = option(0, "seed of every sampled choice of the suite", min=0)
    # --- unit profiles (held-out text)
    profile_splits: tuple[str, ...] = option(("validation", "validation_ood"), "held-out splits units are profiled on",
                                             choices=HELD_OUT)
    profile_tokens: int = option(16384, "tokens of held-out text per profile", min=1)
    window: int = 128  # tokens per profile window
    n_contexts: int = 8  # top contexts per unit: what coherence and themes score, and the cards show
    context_left: int = 12  # tokens of left context (what the unit saw) in a context
    context_right: int = 4  # shown in the cards only
    top_positions: int = 64  # highest-activation positions whose tokens give a unit's top tokens and entropy
    max_units_per_layer: int = 32  # mixers exposing more (Mamba's channels) are profiled on an even subset
    dead_threshold: float = 0.01  # dead: max activation <= this fraction of the layer's largest unit maximum
    themes_distance: float = 0.7  # cosine distance at which average-linkage clusters of contexts are cut
    random_sets: int = 32  # random-context sets for the coherence / themes baseline
    bootstrap: int = option(1000, "bootstrap resamples for the CIs", min=0)
    # --- SAE baseline (residual stream of the model under test)
    sae_layer: int = -1  # index into the residual stream (0 = embeddings, L = last block); -1 = L // 2
    sae_features: int = option(512, "features of the top-k sparse autoencoder", min=1)
    sae_k: int = 16  # active features per token (top-k SAE)
    sae_tokens: int = 32768  # training tokens (train split)
    sae_steps: int = option(800, "SAE training steps", min=1)
    sae_units: int = 32  # features scored per selection (top by variance and top by frequency)
    # --- coverage of known concepts (train split: Brown genres, SOTU eras)
    #: units every model's coverage is computed over (a seeded subset of its units, the same for its untrained
    #: null): a maximum over units grows with their number, so mixers are compared at one count (docs/protocol.md);
    #: a model with fewer units has no coverage
    coverage_units: int = option(16, "units (a seeded subset) every model's coverage is computed over", min=1)
    concept_windows: int = 12  # windows per concept, each from a different document where possible
    concept_window: int = option(64, "tokens per concept window", min=1)
    era_bounds: tuple[int, ...] = (1861, 1901, 1946, 2000)  # SOTU eras: [1790, 1861), ..., [2000, ...)
    # --- interventions (held-out text)
    intervene_modes: tuple[str, ...] = ()  # () = every mode the mixer supports; else those it supports
    target: str = "auto"  # a concept word, or "auto": the most frequent content word that is a unit's top token
    target_unit: str = ""  # LAYER:INDEX overrides the automatic choice
    complement: str = ""  # a word for the complementary control ("" = the target's nearest embedding neighbour)
    complement_unit: str = option("", "LAYER:INDEX overrides the complementary control's unit")
    neutral_unit: str = ""  # "" = the live unit of the target's layer least active on the target word
    intervene_splits: tuple[str, ...] = option(("test", "test_ood"), "held-out splits interventions are scored on",
                                               choices=HELD_OUT)
    intervene_tokens: int = option(16384, "tokens of held-out text the prompts come from", min=1)
    prompt_top_k: int = 10  # a prompt: the target is the next token or among the model's top-k predictions
    max_prompts: int = option(256, "prompts scored per intervention", min=1)
    # --- basis functions (train split) and the token-space comparison
    basis_vocab: int = 512  # top-k tokens
    basis_sequences: int = option(256, "train-split windows the basis functions are computed on", min=1)
    basis_len: int = 128  # T of the basis windows (the Pythia protocol's 128)
    basis_checkpoints: tuple[str, ...] = ()  # more checkpoints of the same model (kept snapshots) to compare
    basis_convention: str = "paper"  # one of BASIS_CONVENTIONS; applies to the basis part and the toy
    # --- the toy reproduction (part "toy")
    toy_vocab: int = option(3000, "vocabulary of the one-hot toy model (top words)", min=1)
    toy_len: int = option(200, "T of the toy sequences", min=1)
    toy_samples: int = option(64, "toy sequences (full-batch gradient descent)", min=1)
    toy_steps: int = option(24, "gradient steps of the toy model", min=1)
    toy_lrs: tuple[float, ...] = (0.5, 5.0)  # the first is the "small" one (acceptance: cosines >= 0.99)
    toy_max_oov: float = option(0.05, "share of out-of-vocabulary tokens a toy sequence may hold", min=0, lt=1)
    toy_early_steps: int = 24  # "early steps": the minimum cosine is taken over steps 1..this
    # --- optional LLM judge (off unless judge_url is set; "local" = the built-in local judge)
    judge_url: str = option("", "OpenAI-compatible judge URL that names units, or local; \"\" = no judge")
    judge_model: str = option("", "model name at judge_url")
    judge_units: int = 0  # units judged per unit type (0 = all)

    def __post_init__(self) -> None:
        for name in ("parts", "profile_splits", "intervene_modes", "intervene_splits", "basis_checkpoints"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name)))
        object.__setattr__(self, "era_bounds", tuple(int(v) for v in _as_tuple(self.era_bounds)))
        object.__setattr__(self, "toy_lrs", tuple(float(v) for v in _as_tuple(self.toy_lrs)))
        bad = [p for p in self.parts if p not in PARTS]
        if bad or not self.parts:
            raise ConfigError(f"interpretability: parts must be among {', '.join(PARTS)}, got {list(self.parts)}.")
        for name in ("profile_splits", "intervene_splits"):
            splits = getattr(self, name)
            if not splits or any(s not in HELD_OUT for s in splits):
                raise ConfigError(
                    f"interpretability: {name} must be held-out splits among {', '.join(HELD_OUT)}, got {list(splits)}."
                )
        positive = ("profile_tokens", "window", "n_contexts", "top_positions", "max_units_per_layer", "random_sets",
                    "sae_features", "sae_k", "sae_tokens", "sae_steps", "sae_units", "concept_windows",
                    "concept_window", "intervene_tokens", "prompt_top_k", "max_prompts", "basis_vocab",
                    "basis_sequences", "basis_len", "toy_vocab", "toy_len", "toy_samples", "toy_steps",
                    "toy_early_steps")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"interpretability: {name} must be a positive integer, got {value!r}.")
        if self.n_contexts < 2:
            raise ConfigError("interpretability: n_contexts must be >= 2 (coherence compares pairs of contexts).")
        if self.window < 2 or self.profile_tokens < self.window:
            raise ConfigError("interpretability: need 2 <= window <= profile_tokens.")
        if self.context_left < 0 or self.context_right < 0 or self.bootstrap < 0 or self.judge_units < 0:
            raise ConfigError("interpretability: context_left, context_right, bootstrap and judge_units must be >= 0.")
        if not 0 <= self.dead_threshold < 1:
            raise ConfigError(f"interpretability: dead_threshold must be in [0, 1), got {self.dead_threshold}.")
        if not 0 < self.themes_distance < 2:
            raise ConfigError(f"interpretability: themes_distance is a cosine distance in (0, 2), got {self.themes_distance}.")
        if self.sae_k > self.sae_features or self.sae_units > self.sae_features:
            raise ConfigError("interpretability: sae_k and sae_units must be <= sae_features.")
        if list(self.era_bounds) != sorted(set(self.era_bounds)):
            raise ConfigError(f"interpretability: era_bounds must be increasing years, got {list(self.era_bounds)}.")
        if self.basis_convention not in BASIS_CONVENTIONS:
            raise ConfigError(f"interpretability: basis_convention must be one of {', '.join(BASIS_CONVENTIONS)}, "
                              f"got '{self.basis_convention}'.")
        if not self.toy_lrs or any(lr <= 0 for lr in self.toy_lrs):
            raise ConfigError(f"interpretability: toy_lrs must be positive learning rates, got {list(self.toy_lrs)}.")
        if not 0 <= self.toy_max_oov < 1:
            raise ConfigError(f"interpretability: toy_max_oov must be in [0, 1), got {self.toy_max_oov}.")
        if not self.target:
            raise ConfigError("interpretability: target must be a word or 'auto'.")
        for name in ("target_unit", "complement_unit", "neutral_unit"):
            parse_unit(getattr(self, name))
        if bool(self.judge_url) != bool(self.judge_model) and self.judge_url != "local":
            raise ConfigError("interpretability: give judge_url and judge_model together (or judge_url=local).")
        if self.judge_url and self.judge_url != "local" and not self.judge_url.startswith(("http://", "https://")):
            raise ConfigError(f"interpretability: judge_url must be http(s)://... or 'local', got '{self.judge_url}'.")

    def has(self, part: str) -> bool:
        return part in self.parts
