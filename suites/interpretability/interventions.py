"""Targeted interventions: switch one unit off and measure what happens to one word and to perplexity.

* Prompts: positions of held-out windows where the target word is plausible next: it is the actual next token or
  among the unmodified model's ``top_k`` predictions there (at most ``max_prompts``, evenly spaced).
* dprob: relative change of the target's probability at each prompt, p_intervened / p_base - 1; reported as the
  mean over prompts and as the max (the signed change of largest magnitude, the paper's "max").
* dppl: relative change of held-out perplexity over every token of the windows, exp(mean NLL change) - 1, and over
  windows the signed largest and the mean per-window change.
* Units: the target unit is the live unit whose top tokens contain the target word (largest share), or named; with
  target "auto" the word is the most frequent content word (held-out next tokens) among live units' top-5 tokens
  (when no unit has one, e.g. with a tiny vocabulary: the most frequent content word of the windows, and the unit
  most active on it relative to its mean; when the windows hold none the part is skipped, with the reason).
  Controls: the complementary unit is that of the target's nearest content word in the model's token embedding
  that is another live unit's top token (or of a named word, or a named unit); the neutral unit is the live unit of
  the target's layer least active on the target word relative to its own mean (or named).
* Modes: ProtoT's write-mask, read-mask and reinit, and "mask" for attention heads and the routed mixers' units,
  through ``mixer.intervene``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from harness.errors import ConfigError, MixbenchError
from harness.kit import Tokenizer
from suites.interpretability.activations import UnitSet
from suites.interpretability.profiles import UnitProfile

BATCH = 16
STOPWORDS = frozenset(
    """
about above after again against also although always among another because been before being below between both
cannot could does doing down during each either else even ever every from further had has have having here hers
herself himself into itself just least less like made make many more most much must myself neither never none nor
not now often once only other others ought ours ourselves over own rather same shall should since some still such
than that their theirs them themselves then there these they this those though through thus till under unless until
upon very were what whatever when where whether which while whom whose will with within without would yet your yours
yourself yourselves shall thee thou thy thine hath doth unto upon said says also come came went
""".split()  # noqa: SIM905
)


def content_word(text: str) -> bool:
    """A token that is a whole lower-risk concept word: a leading space, 4+ letters, not a function word."""
    word = text[1:] if text.startswith(" ") else ""
    return len(word) >= 4 and word.isalpha() and word.lower() not in STOPWORDS


def word_token(tokenizer: Tokenizer, word: str) -> int:
    """The single token of ``word`` (tried with a leading space first, as it appears mid-sentence)."""
    for text in (" " + word.strip(), word):
        ids = tokenizer.encode(text)
        if len(ids) == 1:
            return ids[0]
    raise ConfigError(
        f"interpretability: '{word}' is not a single token of this tokenizer; choose a word that is (or 'auto')."
    )


class NoConceptWord(MixbenchError):
    """``target=auto`` found no word to intervene on: the suite skips the part and says why."""


@dataclass(frozen=True)
class Choice:
    role: str  # "target" | "complement" | "neutral" | "random"
    layer: int
    index: int
    label: str
    word: str  # the word the unit was chosen for ("" for the neutral control)
    how: str


def choose_units(profiles: list[UnitProfile], unit_set: UnitSet, profile_ids: torch.Tensor, model,
                 tokenizer: Tokenizer, next_counts: np.ndarray, target: str, named: dict[str, tuple[int, int] | None],
                 complement_word: str, seed: int = 0) -> tuple[int, list[Choice]]:
    """The target token id and the target, complement, neutral and random units (the random one: a live unit of
    the target's layer drawn with ``seed``, the baseline "any unit" that the target unit must beat)."""
    live = [p for p in profiles if not p.dead]
    by_key = {(p.layer, p.index): p for p in profiles}
    if target == "auto":
        candidates = {t for p in live for t in p.top_token_ids[:5] if content_word(tokenizer.decode([t]))}
        if not candidates:  # e.g. a small vocabulary: any content word that occurs as a next token will do
            candidates = {int(t) for t in np.flatnonzero(next_counts) if content_word(tokenizer.decode([int(t)]))}
        if not candidates:
            raise NoConceptWord("no content word (a whole word of 4+ letters, not a function word) occurs in the "
                                "intervention windows; name a target word")
        target_id = max(candidates, key=lambda t: (next_counts[t], -t))
    else:
        target_id = word_token(tokenizer, target)
    choices = [_unit_for("target", target_id, live, by_key, named.get("target"), tokenizer, unit_set, profile_ids)]
    comp_word_id = word_token(tokenizer, complement_word) if complement_word else _nearest(
        target_id, {t for p in live if (p.layer, p.index) != (choices[0].layer, choices[0].index)
                    for t in p.top_token_ids[:5] if content_word(tokenizer.decode([t]))} - {target_id}, model)
    if comp_word_id is not None or named.get("complement"):
        others = [p for p in live if (p.layer, p.index) != (choices[0].layer, choices[0].index)]
        choices.append(_unit_for("complement", comp_word_id, others, by_key, named.get("complement"), tokenizer,
                                 unit_set, profile_ids))
    choices.append(_neutral(target_id, choices, live, by_key, named.get("neutral"), unit_set, profile_ids))
    random_unit = _random(choices, live, seed)
    if random_unit is not None:
        choices.append(random_unit)
    return target_id, choices


def _random(chosen: list[Choice], live, seed: int) -> Choice | None:
    """A live unit of the target's layer other than the target unit, drawn with ``seed`` (None if there is none)."""
    target = chosen[0]
    pool = sorted((p for p in live if p.layer == target.layer and p.index != target.index), key=lambda p: p.index)
    if not pool:
        return None
    p = pool[int(np.random.default_rng(seed).integers(len(pool)))]
    return Choice("random", p.layer, p.index, p.label, "", f"drawn at random (seed {seed}) from the target's layer")


def _unit_for(role, token_id, live, by_key, named, tokenizer, unit_set, profile_ids) -> Choice:
    word = tokenizer.decode([token_id]) if token_id is not None else ""
    if named is not None:
        if named not in by_key:
            raise ConfigError(f"interpretability: {role}_unit {named[0]}:{named[1]} is not a profiled unit.")
        p = by_key[named]
        return Choice(role, p.layer, p.index, p.label, word, "named")
    holders = [(dict(zip(p.top_token_ids, (s for _, s in p.top_tokens))).get(token_id, 0.0), p) for p in live]
    share, best = max(holders, key=lambda sp: (sp[0], sp[1].max_activation))
    if share > 0:
        return Choice(role, best.layer, best.index, best.label, word, f"top tokens ({share:.0%} of its top positions)")
    ratio = _activation_ratio(token_id, unit_set, profile_ids)
    cols = {(u.layer, u.index): c for c, u in enumerate(unit_set.units)}
    best = max(live, key=lambda p: ratio[cols[(p.layer, p.index)]])
    return Choice(role, best.layer, best.index, best.label, word, "most active on the word (in no unit's top tokens)")


def _neutral(target_id, chosen, live, by_key, named, unit_set, profile_ids) -> Choice:
    if named is not None:
        if named not in by_key:
            raise ConfigError(f"interpretability: neutral_unit {named[0]}:{named[1]} is not a profiled unit.")
        p = by_key[named]
        return Choice("neutral", p.layer, p.index, p.label, "", "named")
    taken = {(c.layer, c.index) for c in chosen}
    layer = chosen[0].layer
    pool = [p for p in live if p.layer == layer and (p.layer, p.index) not in taken]
    if not pool:
        pool = [p for p in live if (p.layer, p.index) not in taken]
    ratio = _activation_ratio(target_id, unit_set, profile_ids)
    cols = {(u.layer, u.index): c for c, u in enumerate(unit_set.units)}
    p = min(pool, key=lambda q: ratio[cols[(q.layer, q.index)]])
    return Choice("neutral", p.layer, p.index, p.label, "", "least active on the target word")


def _activation_ratio(token_id, unit_set: UnitSet, profile_ids: torch.Tensor) -> np.ndarray:
    """Each unit's mean activation on occurrences of ``token_id`` over its mean activation (0 if it never occurs)."""
    acts = unit_set.acts.reshape(-1, unit_set.acts.shape[-1]).double()
    where = profile_ids.reshape(-1) == token_id
    if not bool(where.any()):
        return np.zeros(acts.shape[1])
    return (acts[where].mean(0) / acts.mean(0).clamp(min=1e-12)).numpy()


def _nearest(token_id: int, candidates: set[int], model) -> int | None:
    if not candidates:
        return None
    emb = F.normalize(model.embed.weight.detach().float(), dim=-1)
    cands = sorted(candidates)
    sims = emb[cands] @ emb[token_id]
    return cands[int(sims.argmax())]


@dataclass
class Baseline:
    """The unmodified model on the intervention windows."""

    prompts: torch.Tensor  # [P, 2] (window, position)
    p_target: torch.Tensor  # [P]
    nll: torch.Tensor  # [n, T] per-token NLL
    valid: torch.Tensor  # [n, T] bool


@torch.no_grad()
def _forward(model, ids: torch.Tensor, target_id: int, top_k: int = 1):
    """Per position of ``ids [n, T+1]``: log p(target), NLL of the actual next token, k-th largest log-prob."""
    logp_target, nll, kth = [], [], []
    for s in range(0, len(ids), BATCH):
        x, y = ids[s : s + BATCH, :-1], ids[s : s + BATCH, 1:]
        logp = model(x)[0].float().log_softmax(-1)
        logp_target.append(logp[..., target_id])
        nll.append(-logp.gather(-1, y[..., None]).squeeze(-1))
        kth.append(logp.topk(top_k, dim=-1).values[..., -1])
    return torch.cat(logp_target), torch.cat(nll), torch.cat(kth)


@torch.no_grad()
def baseline(model, ids: torch.Tensor, target_id: int, top_k: int, max_prompts: int, pad_id: int) -> Baseline:
    logp_target, nll, kth = _forward(model, ids, target_id, top_k)
    valid = ids[:, 1:] != pad_id
    plausible = ((ids[:, 1:] == target_id) | (logp_target >= kth)) & valid
    prompts = plausible.nonzero()
    if len(prompts) > max_prompts:
        prompts = prompts[(torch.arange(max_prompts) * len(prompts)) // max_prompts]
    return Baseline(prompts, logp_target[prompts[:, 0], prompts[:, 1]].exp(), nll, valid)


@dataclass
class InterventionRow:
    mode: str
    role: str
    label: str
    layer: int
    index: int
    word: str
    how: str
    target_word: str
    n_prompts: int
    dprob_mean: float
    dprob_max: float
    dppl: float
    dppl_max: float
    dppl_mean: float
    #: per prompt (in the order of ``Baseline.prompts``): the relative change of the target word's probability
    dprob: tuple[float, ...] = field(default=(), repr=False)
    #: per window: the summed change of NLL and the tokens it sums over (the perplexity change's items)
    window_dnll: tuple[float, ...] = field(default=(), repr=False)
    window_tokens: tuple[float, ...] = field(default=(), repr=False)

    def to_json(self) -> dict:
        per_item = ("dprob", "window_dnll", "window_tokens")
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()
                if k not in per_item}


@torch.no_grad()
def intervene(model, ids: torch.Tensor, base: Baseline, target_id: int, choice: Choice, mode: str,
              target_word: str) -> InterventionRow:
    mixer = model.blocks[choice.layer].mixer
    with mixer.intervene([choice.index], mode):
        logp_target, nll, _ = _forward(model, ids, target_id)
    P = len(base.prompts)
    if P:
        p = logp_target[base.prompts[:, 0], base.prompts[:, 1]].exp()
        dprob = (p / base.p_target - 1).double()
        dprob_mean, dprob_max = float(dprob.mean()), _signed_max(dprob)
    else:
        dprob = torch.zeros(0, dtype=torch.float64)
        dprob_mean = dprob_max = float("nan")
    v = base.valid.double()
    diff = (nll - base.nll).double() * v
    dppl = math.expm1(float(diff.sum() / v.sum()))
    per_window = torch.expm1(diff.sum(1) / v.sum(1).clamp(min=1))
    return InterventionRow(mode, choice.role, choice.label, choice.layer, choice.index, choice.word, choice.how,
                           target_word, P, dprob_mean, dprob_max, dppl, _signed_max(per_window),
                           float(per_window.mean()), tuple(dprob.tolist()), tuple(diff.sum(1).tolist()),
                           tuple(v.sum(1).tolist()))


def _signed_max(values: torch.Tensor) -> float:
    return float(values[values.abs().argmax()])
