"""The interpretability suite: basis functions against a direct counting loop, the toy model's zero-init gradients,
Hungarian coverage against brute force, profiles / entropy / dead units / coherence on hand-made cases, unit
contributions against masked re-runs, interventions against hand computations (a whole layer masked = its mixer
output zero; one prototype masked = the mixer with that prototype's write removed by hand), the SAE, the sentence
embedding against mean pooling by hand, the optional judge through the judge client, HTML escaping of the unit
cards, and the suite end to end through the CLI on the tiny checkpoints."""

from __future__ import annotations

import itertools
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.model.checkpoint import load_model
from harness.cli import main
from harness.errors import ConfigError
from harness.mixer import Unit
from suites.interpretability import (
    QUICKSTART,
    InterpConfig,
    basis_functions,
    cards,
    correlations,
    hungarian_coverage,
    judge,
    scores,
)
from suites.interpretability.activations import (
    UnitSet,
    capture,
    contributions,
    projected_contributions,
)
from suites.interpretability.basis import frobenius_cosine, neighbours
from suites.interpretability.interventions import Choice, baseline, intervene
from suites.interpretability.profiles import (
    Context,
    UnitProfile,
    build_profiles,
    read_write_lag,
)
from suites.interpretability.sae import train_sae
from suites.interpretability.tokenspace import (
    covariance,
    protocol_cosine,
    theory_covariance,
)
from suites.interpretability.toy import UNK, OneHotAttention, toy_data, train_toy, word_tokens

# ----------------------------------------------------------------------------------------------- basis functions


def naive_basis(ids: list[list[int]], k: int, full_vocab: int | None = None) -> dict[str, np.ndarray]:
    """The Addendum's definitions, one position at a time (pure Python; -1 = outside the vocabulary). Top-k
    convention (``full_vocab`` None): centred by 1/k, zero when the target is outside the vocabulary; the paper's:
    centred by 1/full_vocab, an outside target is a zero one-hot row (so -1/full_vocab in every column)."""
    N, T = len(ids), len(ids[0]) - 1
    nt = N * T

    def r(y: int, a: int) -> float:
        if full_vocab is None:
            return 0.0 if y < 0 else float(y == a) - 1.0 / k
        return float(y == a) - 1.0 / full_vocab

    B = np.zeros((k, k))
    Phi = np.zeros((k, k))
    for seq in ids:
        x, y = seq[:-1], seq[1:]
        for t in range(T):
            for a in range(k):
                if x[t] >= 0:
                    B[x[t], a] += r(y[t], a) / nt
                for j in range(k):
                    share = sum(1 for m in range(t + 1) if x[m] == j) / (t + 1)
                    Phi[a, j] += r(y[t], a) * share / nt
    Sigma = B.T @ B
    G = Sigma @ Phi
    Q = np.zeros((k, k))
    Qpos = np.zeros((T, T))
    for seq in ids:
        x, y = seq[:-1], seq[1:]
        M = np.zeros((T, T))
        for t in range(T):
            for j in range(t + 1):
                if x[j] >= 0:
                    M[t, j] = sum(r(y[t], a) * G[a, x[j]] for a in range(k))
        for t in range(T):
            mean = sum(M[t, m] for m in range(t + 1)) / (t + 1)
            for j in range(t + 1):
                q = (M[t, j] - mean) / (t + 1)
                Qpos[t, j] += q / nt
                if x[t] >= 0 and x[j] >= 0:
                    Q[x[t], x[j]] += q / nt
    Delta = np.array([sum(Qpos[t, t - m] for t in range(m, T)) for m in range(T)])
    return {"B": B, "Sigma": Sigma, "Phi": Phi, "Q": Q, "Delta": Delta}


def test_basis_functions_match_a_direct_loop_on_a_tiny_corpus():
    ids = [
        [0, 1, 2, 1, 0, 3, 1],
        [2, 2, -1, 1, 3, 0, 0],
        [3, 1, 0, -1, -1, 2, 1],
    ]
    k = 4
    ours = basis_functions(torch.tensor(ids), k, chunk=2)
    ref = naive_basis(ids, k)
    for name in ("B", "Sigma", "Phi", "Q", "Delta"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), ref[name], rtol=1e-12, atol=1e-15, err_msg=name)
    # the identities of the paper on a top-k vocabulary: rows of B and columns of Phi sum to zero
    np.testing.assert_allclose(ours.B.sum(1).numpy(), 0, atol=1e-15)
    np.testing.assert_allclose(ours.Phi.sum(0).numpy(), 0, atol=1e-15)
    np.testing.assert_allclose(ours.value_term.numpy(), ref["Phi"].T @ ref["B"].T, atol=1e-15)
    assert ours.Q.abs().max() > 0 and ours.Delta.abs().max() > 0
    # B entry by hand: token 1 is followed by 2, 0, 0 (seq 0), 3 (seq 1), 0, 3 (seq 0 ends with 1: no next)
    # over N*T = 18 positions: count(1 -> 0) = 2 of the 4 in-vocabulary successors of 1 ... centred by 1/k each
    follows = [(s[t], s[t + 1]) for s in ids for t in range(len(s) - 1) if s[t] == 1 and s[t + 1] >= 0]
    expected = (sum(1 for _, b in follows if b == 0) - len(follows) / k) / 18
    assert ours.B[1, 0].item() == pytest.approx(expected, abs=1e-15)


def test_paper_convention_matches_a_direct_loop_and_the_pythia_scripts_algebra():
    ids = [
        [0, 1, 2, 1, 0, 3, 1],
        [2, 2, -1, 1, 3, 0, 0],
        [3, 1, 0, -1, -1, 2, 1],
    ]
    k, V = 4, 11
    ours = basis_functions(torch.tensor(ids), k, chunk=2, full_vocab=V)
    ref = naive_basis(ids, k, full_vocab=V)
    for name in ("B", "Sigma", "Phi", "Q", "Delta"):
        np.testing.assert_allclose(getattr(ours, name).numpy(), ref[name], rtol=1e-12, atol=1e-15, err_msg=name)
    # B by hand: every input position of token 1 is kept (an outside next token too) and centred by 1/V, not 1/k
    n_pos = sum(1 for s in ids for t in range(len(s) - 1) if s[t] == 1)
    to_zero = sum(1 for s in ids for t in range(len(s) - 1) if s[t] == 1 and s[t + 1] == 0)
    assert ours.B[1, 0].item() == pytest.approx((to_zero - n_pos / V) / 18, abs=1e-15)
    # the same statistics written as the released pythia.py forms them (dense one-hots over the k columns,
    # r = y_onehot - 1/|V|, its B = r^T x / NT and its Q = x^T (J M)^T x with M^T = x G r^T): its B and Q are
    # ours transposed (its Q also lacks the 1/NT)
    x = torch.tensor(ids)[:, :-1]
    y = torch.tensor(ids)[:, 1:]
    X = F.one_hot(x.clamp(min=0), k).double() * (x >= 0)[..., None]
    r = F.one_hot(y.clamp(min=0), k).double() * (y >= 0)[..., None] - 1.0 / V
    T = x.shape[1]
    A0 = torch.tril(torch.ones(T, T, dtype=torch.float64)) / torch.arange(1, T + 1, dtype=torch.float64)[:, None]
    nt = x.numel()
    B_script = sum(r[n].T @ X[n] for n in range(len(ids))) / nt
    Phi_script = sum(r[n].T @ (A0 @ X[n]) for n in range(len(ids))) / nt
    G_script = (B_script.T @ Phi_script).T @ B_script.T  # Phi^T B^T B: prefix x next
    t = torch.arange(T, dtype=torch.float64)[:, None, None]
    eye = torch.eye(T, dtype=torch.float64)[None]
    inside = (torch.arange(T)[None, :, None] <= torch.arange(T)[:, None, None]) & (
        torch.arange(T)[None, None, :] <= torch.arange(T)[:, None, None])
    J = (eye / (t + 1) - 1.0 / (t + 1) ** 2) * inside  # softmax Jacobian at uniform attention over t+1 keys
    Q_script = sum(X[n].T @ torch.einsum("tjk,tk->tj", J, (X[n] @ G_script @ r[n].T).T).T @ X[n]
                   for n in range(len(ids)))
    np.testing.assert_allclose(B_script.T.numpy(), ours.B.numpy(), atol=1e-15)
    np.testing.assert_allclose(Phi_script.numpy(), ours.Phi.numpy(), atol=1e-15)
    np.testing.assert_allclose(Q_script.T.numpy() / nt, ours.Q.numpy(), atol=1e-15)
    # with no outside token and |V| = k the two conventions are the same definition
    full = torch.tensor([[0, 1, 2, 1, 0, 3, 1], [2, 2, 0, 1, 3, 0, 0]])
    a, b = basis_functions(full, k), basis_functions(full, k, full_vocab=k)
    for name in ("B", "Phi", "Q", "Delta"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="full_vocab"):
        basis_functions(full, k, full_vocab=k - 1)


def test_neighbours_read_the_largest_entries_of_a_row():
    m = torch.tensor([[5.0, 3.0, -1.0, 4.0], [0.0, 1.0, 2.0, 3.0]])
    assert neighbours(m, 0, 2) == [(0, 5.0), (3, 4.0)]
    assert neighbours(m, 0, 2, exclude=0) == [(3, 4.0), (1, 3.0)]
    assert [j for j, _ in neighbours(m, 1, 9, exclude=3)] == [2, 1, 0]


def test_basis_rejects_bad_indices():
    with pytest.raises(ValueError, match="vocabulary indices"):
        basis_functions(torch.tensor([[0, 5, 1]]), 4)
    with pytest.raises(ValueError, match="T >= 1"):
        basis_functions(torch.tensor([[0]]), 4)


def test_toy_model_zero_init_gradients_are_the_leading_terms():
    gen = torch.Generator().manual_seed(0)
    k, T, N = 12, 10, 6
    ids = torch.randint(0, k, (N, T + 1), generator=gen)
    ids[0, 3] = -1  # one out-of-vocabulary token: a zero input and an ignored target
    b = basis_functions(ids, k)
    model = OneHotAttention(k, T, torch.float64)
    model.loss(ids).backward()
    # at zero init only W_O moves, by exactly -B
    np.testing.assert_allclose(model.W_O.grad.numpy(), -b.B.numpy(), atol=1e-14)
    for name in ("W", "V", "P"):
        assert getattr(model, name).grad.abs().max() == 0
    # a few small full-batch SGD steps: each matrix aligns with its leading term
    run = train_toy(ids, k, lr=0.05, steps=5, basis=b, dtype=torch.float64)
    assert run.steps[0]["cos_W_O"] == pytest.approx(1.0, abs=1e-12)  # W_O = lr * B after one step
    assert run.steps[0]["scale_W_O"] == pytest.approx(1.0, abs=1e-12)
    assert run.min_cos("W_O") > 0.999 and run.min_cos("V") > 0.999  # V is zero (NaN) after step 1, then aligned
    assert run.steps[4]["cos_W"] > 0.99 and run.steps[4]["cos_P"] > 0.99
    # the loss at zero (uniform predictions) sums over in-vocabulary targets and divides by all N*T positions
    valid = int((ids[:, 1:] >= 0).sum())
    assert run.steps[-1]["loss"] < run.steps[0]["loss"] == pytest.approx(math.log(k) * valid / (N * T), abs=1e-12)


def test_toy_paper_convention_maps_outside_words_to_one_unk_token():
    texts = ["the cat sat on the mat . the dog sat on the cat , a bird flew over the mat and the dog ran off ."] * 3
    k, T = 6, 7
    paper = toy_data(texts, k, T, samples=4, seed=0, max_oov=0.5, unk=True)
    top_k = toy_data(texts, k, T, samples=4, seed=0, max_oov=0.5, unk=False)
    assert paper.vocab == top_k.vocab + [UNK] and len(paper.vocab) == k + 1
    assert (top_k.ids < 0).any() and (paper.ids >= 0).all()  # the same chunks, -1 replaced by the UNK index
    torch.testing.assert_close(paper.ids, torch.where(top_k.ids < 0, k, top_k.ids))
    assert paper.oov_fraction == top_k.oov_fraction > 0
    # on the in-vocabulary rows/columns, the UNK model's B and Phi are the paper's convention with |V| = k + 1
    with_unk = basis_functions(paper.ids, k + 1)
    restricted = basis_functions(top_k.ids, k, full_vocab=k + 1)
    torch.testing.assert_close(with_unk.B[:k, :k], restricted.B, rtol=0, atol=1e-15)
    torch.testing.assert_close(with_unk.Phi[:k, :k], restricted.Phi, rtol=0, atol=1e-15)
    # and its zero-init gradients are its basis functions: every position counts, the loss at zero is log |V|
    model = OneHotAttention(k + 1, T, torch.float64)
    loss = model.loss(paper.ids)
    loss.backward()
    np.testing.assert_allclose(model.W_O.grad.numpy(), -with_unk.B.numpy(), atol=1e-14)
    assert float(loss.detach()) == pytest.approx(math.log(k + 1), abs=1e-12)


def test_word_tokens_follow_the_papers_tokenizer():
    assert word_tokens("Once upon a time, Tom's cat ran 42 km!") == [
        "once", "upon", "a", "time", ",", "tom", "'", "s", "cat", "ran", "4", "2", "km", "!"]  # fmt: skip


def test_frobenius_cosine_and_the_pythia_protocol():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert frobenius_cosine(a, a) == pytest.approx(1.0)
    assert frobenius_cosine(a, -2 * a) == pytest.approx(-1.0)
    assert frobenius_cosine(a, torch.tensor([[0.0, 0.0], [0.0, 0.0]])) != frobenius_cosine(a, a)  # NaN for zero
    # covariance of rows by hand: rows centred, Gram / (columns - 1), Frobenius-normalised
    m = torch.tensor([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0], [0.0, 1.0, 5.0]])
    c = m - m.mean(1, keepdim=True)
    gram = (c @ c.T / 2).double()
    np.testing.assert_allclose(covariance(m).numpy(), (gram / gram.norm()).numpy(), atol=1e-15)
    # the protocol: theory rows are normalised (so their scale does not matter), both sides' rows are centred (so
    # a constant added to an actual row does not matter), and a matching map scores exactly 1
    theory = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scaled = theory * torch.arange(1, 7, dtype=torch.float64)[:, None]
    actual = theory / theory.norm(dim=1, keepdim=True) + torch.arange(6, dtype=torch.float64)[:, None]
    assert protocol_cosine(actual, theory_covariance(scaled)) == pytest.approx(1.0, abs=1e-12)
    assert protocol_cosine(theory, theory_covariance(scaled)) < 0.999  # unequal row norms do count on the actual side


# ----------------------------------------------------------------------------------------------- coverage


def test_correlations_match_numpy_and_hungarian_matches_brute_force():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(40, 5))
    labels = rng.integers(0, 3, size=40)
    corr = correlations(values, labels, 3)
    for u in range(5):
        for c in range(3):
            assert corr[u, c] == pytest.approx(np.corrcoef(values[:, u], labels == c)[0, 1], abs=1e-12)
    cov = hungarian_coverage(corr)
    best = max(itertools.permutations(range(5), 3), key=lambda p: sum(corr[p[c], c] for c in range(3)))
    assert list(cov.unit_of) == list(best)
    assert cov.mean == pytest.approx(np.mean([corr[best[c], c] for c in range(3)]))
    # a constant unit correlates 0 with everything
    values[:, 2] = 1.0
    assert (correlations(values, labels, 3)[2] == 0).all()


def test_hungarian_coverage_finds_planted_units_and_one_unit_cannot_cover_two_concepts():
    labels = np.repeat(np.arange(3), 10)
    rng = np.random.default_rng(0)
    values = rng.normal(scale=0.1, size=(30, 6))
    values[:, 4] += labels == 0  # unit 4 is concept 0
    values[:, 1] += 2.0 * (labels == 2)  # unit 1 is concept 2
    values[:, 5] += (labels == 0) + 0.9 * (labels == 1)  # a broad unit: best for concept 1 among the rest
    corr = correlations(values, labels, 3)
    cov = hungarian_coverage(corr)
    assert cov.unit_of.tolist() == [4, 5, 1]
    assert cov.per_concept[0] > 0.9 and cov.per_concept[2] > 0.9
    # more concepts than units: the unmatched concept gets 0 and no unit
    few = hungarian_coverage(corr[:2])
    assert (few.unit_of == -1).sum() == 1 and few.per_concept[few.unit_of == -1][0] == 0


# ----------------------------------------------------------------------------------------------- profiles


class FakeTokenizer:
    eos_id, pad_id = 0, 1

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{i}>" for i in ids)


def test_profiles_top_tokens_entropy_contexts_and_dead_units():
    n, T = 3, 20
    ids = (torch.arange(n * T).reshape(n, T) % 7 + 2).long()  # tokens 2..8, never eos/pad
    ids[1, 10] = 0  # an end-of-text token is never a top position
    acts = torch.zeros(n, T, 4)
    # unit 0 fires only on token 5; unit 1 on tokens 3 and 6 equally often; unit 2 never; unit 3 barely
    acts[..., 0] = (ids == 5).float() * 2.0
    acts[..., 1] = ((ids == 3) | (ids == 6)).float()
    acts[..., 3] = 1e-4
    acts[1, 10, :] = 100.0  # at the end-of-text token: ignored
    acts[0, 1, 1] = 50.0  # inside the first context_left positions: ignored
    units = [Unit(0, i, "prototype") for i in range(4)]
    profiles = build_profiles(UnitSet("units", "prototype", "write-gate", units, acts), ids, FakeTokenizer(),
                              n_contexts=3, left=4, right=2, top_positions=8, dead_threshold=0.01)
    p0, p1, p2, p3 = profiles
    assert p0.top_token_ids == [5] and p0.token_entropy == 0.0 and p0.max_activation == 2.0
    assert set(p1.top_token_ids) == {3, 6} and p1.token_entropy == pytest.approx(1.0)  # 4 + 4 of 8: one bit
    assert p2.dead and p3.dead and not p0.dead and not p1.dead  # 1e-4 <= 1% of the layer's largest maximum
    for c in p0.contexts:
        assert c.token == "<5>" and c.left.count("<") == 4 and c.right.count("<") <= 2
    assert len(p0.contexts) == 3 and p2.contexts == [] and p2.top_tokens == [] and math.isnan(p2.token_entropy)
    assert json.loads(json.dumps(p2.to_json()))["token_entropy"] is None  # a unit that never fires: valid JSON
    # contexts of one window are more than context_left apart: with left = 8, token 5 occurs at positions >= 8 twice
    # per window, 7 apart, so each window gives one context (6 without the rule)
    wide = build_profiles(UnitSet("units", "prototype", "write-gate", units[:1], acts[..., :1]), ids, FakeTokenizer(),
                          n_contexts=6, left=8, right=0, top_positions=8, dead_threshold=0.01)[0]
    assert len(wide.contexts) == 3
    assert p0.label == "L0 P0" and p1.mean_activation == pytest.approx(float(acts[..., 1][ids != 0].mean()))


def test_read_write_lag_finds_a_planted_shift():
    gen = torch.Generator().manual_seed(0)
    write = torch.rand(4, 40, 3, generator=gen)
    read = torch.zeros_like(write)
    read[:, :-1] = write[:, 1:]  # read at t what is written at t + 1: lag +1
    shared = torch.rand(4, 40, 3, generator=gen)
    from suites.interpretability.activations import Gates

    lags = read_write_lag(Gates({1: write, 0: shared}, {1: read, 0: shared}), max_lag=3)
    assert {key[0] for key in lags} == {1}  # a shared-routing layer (read gate = write gate) has no lag
    assert all(lags[(1, k)][0] == 1 and lags[(1, k)][1] > 0.95 for k in range(3))


def test_coherence_themes_and_summary_by_hand():
    emb = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    assert scores.coherence(emb) == pytest.approx(1 / 3)  # pairs: 0, 1, 0
    assert scores.n_themes(emb, 0.7) == 2
    assert scores.n_themes(np.array([[1.0, 0.0], [0.99, 0.141]]), 0.7) == 1
    s = scores.summarise([1.0, 2.0, 3.0, float("nan")], bootstrap=200, seed=0)
    assert s.n == 3 and s.mean == 2.0 and s.sd == pytest.approx(1.0) and s.interval.low <= 2.0 <= s.interval.high


# ----------------------------------------------------------------------------------------------- embedding


def test_sentence_embedding_is_mean_pooled_minilm(monkeypatch):
    import suites.interpretability.embedding as embedding
    from suites.interpretability.embedding import SentenceEmbedder, _load

    same = "The president spoke to Congress about the economy."
    texts = [same, "A cat sat on the mat.", same, "The president addressed Congress on the economy."]
    emb = SentenceEmbedder(batch_size=8).embed(texts)
    assert emb.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)
    assert float(emb[0] @ emb[2]) == pytest.approx(1.0, abs=1e-6)  # identical texts
    assert float(emb[0] @ emb[3]) > 0.8 and float(emb[0] @ emb[1]) < 0.2  # a paraphrase vs an unrelated sentence
    tok, model = _load()
    for i in (0, 1):  # by hand, one text at a time (no padding): mean of the last hidden states, normalised
        batch = tok(texts[i], return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state[0]
        ref = F.normalize(hidden.mean(0), dim=0).numpy()
        np.testing.assert_allclose(emb[i], ref, atol=1e-5)
    # a later run in this process (the next mixer's) reuses every vector it has: nothing is embedded again
    monkeypatch.setattr(embedding, "_load", lambda: pytest.fail("a text was embedded twice"))
    np.testing.assert_array_equal(SentenceEmbedder().embed([texts[1], texts[0]]), emb[[1, 0]])


# ----------------------------------------------------------------------------------------------- SAE


def test_top_k_sae_reduces_reconstruction_error_and_keeps_k_active():
    gen = torch.Generator().manual_seed(0)
    dirs = F.normalize(torch.randn(24, 16, generator=gen), dim=1)
    codes = torch.zeros(2048, 24)
    picks = torch.randint(0, 24, (2048, 3), generator=gen)
    codes.scatter_(1, picks, torch.rand(2048, 3, generator=gen) + 0.5)
    x = codes @ dirs + 0.3
    untrained = train_sae(x, features=32, k=4, steps=0, seed=0)
    trained = train_sae(x, features=32, k=4, steps=300, seed=0, batch=256, lr=3e-3)
    before, after = untrained.fraction_of_variance_unexplained(x), trained.fraction_of_variance_unexplained(x)
    assert after < 0.5 * before and after < 0.2
    z = trained.encode(x)
    assert int((z != 0).sum(1).max()) <= 4 and (z >= 0).all()
    np.testing.assert_allclose(trained.W_dec.norm(dim=1).detach().numpy(), 1.0, atol=1e-5)


# ----------------------------------------------------------------------------------------------- tiny models


@pytest.fixture(scope="module")
def tiny_protot(protot_checkpoint):
    model, _ = load_model(protot_checkpoint)
    return model.eval()


@pytest.fixture(scope="module")
def tiny_attention(attention_checkpoint):
    model, _ = load_model(attention_checkpoint)
    return model.eval()


def zeroed_mixer_logits(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """Logits with one layer's mixer output replaced by zeros (a forward hook): the reference for a full mask."""
    hook = model.blocks[layer].mixer.register_forward_hook(lambda m, a, out: (torch.zeros_like(out[0]), out[1]))
    try:
        return model(ids)[0]
    finally:
        hook.remove()


@torch.no_grad()
def test_masking_every_unit_of_a_layer_equals_a_zero_mixer_output(tiny_protot, tiny_attention):
    ids = torch.randint(2, 500, (2, 24), generator=torch.Generator().manual_seed(1))
    # attention: every head masked
    mixer = tiny_attention.blocks[1].mixer
    with mixer.intervene(list(range(mixer.n_heads)), "mask"):
        masked = tiny_attention(ids)[0]
    torch.testing.assert_close(masked, zeroed_mixer_logits(tiny_attention, 1, ids), rtol=0, atol=1e-5)
    assert (masked - tiny_attention(ids)[0]).abs().max() > 1e-3  # and that is not a no-op
    # ProtoT: every prototype masked -- R-1 on the write path and the last one on the read path -- leaves every
    # channel a token reads empty (mass floor, zero sums), so the layer adds nothing (the mixer refuses a write mask
    # on all R prototypes: nothing would be left to renormalise the write gate over)
    layer = 1
    mixer = tiny_protot.blocks[layer].mixer
    R = mixer.cfg.n_prototypes
    with mixer.intervene(list(range(R - 1)), "write-mask"), mixer.intervene([R - 1], "read-mask"):
        masked = tiny_protot(ids)[0]
    torch.testing.assert_close(masked, zeroed_mixer_logits(tiny_protot, layer, ids), rtol=0, atol=1e-5)
    assert (masked - tiny_protot(ids)[0]).abs().max() > 1e-3


def protot_by_hand(mixer, x: torch.Tensor, masked: int) -> torch.Tensor:
    """A ProtoT layer with its own read gate from docs/PAPERS.md's equations, one position at a time, with prototype
    ``masked`` removed from the write softmax (the other R-1 renormalise). A conv layer smooths the values:
    v_t <- v_t / 2 + (sum_i w_i v_{t-4+i}) / 2 (no bias, as released), zeros before the start."""
    P = mixer.prototypes.detach().double()
    R = P.shape[0]
    beta = torch.sigmoid(mixer.beta_logit.detach().double())
    tau_w, tau_r = mixer.tau_write.detach().double().abs() + 2e-6, mixer.tau_read.detach().double().abs() + 2e-6
    V, U, W = (m.weight.detach().double() for m in (mixer.value, mixer.out, mixer.read_query))
    alpha = mixer.alpha.detach().double()
    x = x.double()
    out = torch.zeros_like(x)
    width = mixer.cfg.conv_width
    for b in range(x.shape[0]):
        raw = [V @ x[b, t] for t in range(x.shape[1])]
        values = raw
        if mixer.has_conv:
            w = mixer.conv.weight.detach().double()[:, 0]  # no bias, as released
            values = []
            for t in range(x.shape[1]):
                conv = torch.zeros_like(raw[t])
                for i in range(width):
                    s = t - (width - 1) + i
                    if s >= 0:
                        conv += w[:, i] * raw[s]
                values.append(0.5 * raw[t] + 0.5 * conv)
        S = torch.zeros(R, V.shape[0], dtype=torch.float64)
        M = torch.zeros(R, dtype=torch.float64)
        for t in range(x.shape[1]):
            rho = torch.softmax((W @ x[b, t]) @ P.T / tau_r, 0)
            pm = S / M.clamp(min=mixer.cfg.mass_floor)[:, None]  # strictly past: read before this token writes
            out[b, t] = alpha * (U @ (rho[:, None] * pm).sum(0))
            logits = (x[b, t] @ P.T) / tau_w
            logits[masked] = -math.inf
            pi = torch.softmax(logits, 0)
            S = beta[:, None] * S + ((1 - beta) * pi)[:, None] * values[t][None, :]
            M = beta * M + (1 - beta) * pi
    return out


@torch.no_grad()
def test_write_masking_one_prototype_removes_exactly_its_writes(tiny_protot):
    ids = torch.randint(2, 500, (2, 16), generator=torch.Generator().manual_seed(2))
    layer = 1  # the tiny preset has 2 layers: layer 1 reads with its own gate (and smooths values with the conv)
    mixer = tiny_protot.blocks[layer].mixer
    assert not mixer.shared_routing
    xs, gates = capture(tiny_protot, ids, gates=True)
    k = int(gates.write[layer].mean((0, 1)).argmax())  # the prototype written most
    with mixer.intervene([k], "write-mask"):
        masked = mixer(xs[layer])[0]
    torch.testing.assert_close(masked.double(), protot_by_hand(mixer, xs[layer], k), rtol=1e-4, atol=1e-6)
    assert (masked - mixer(xs[layer])[0]).abs().max() > 1e-4


@torch.no_grad()
def test_unit_contributions_from_the_output_projection_equal_masked_reruns(tiny_attention):
    ids = torch.randint(2, 500, (3, 20), generator=torch.Generator().manual_seed(3))
    xs, gates = capture(tiny_attention, ids, gates=True)
    assert gates is None
    mixer = tiny_attention.blocks[0].mixer
    heads = list(range(mixer.n_heads))
    fast = projected_contributions(mixer, xs[0], heads)
    slow = contributions(mixer, xs[0], heads)
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(ConfigError, match="out of range"):
        projected_contributions(mixer, xs[0], [mixer.n_heads])


@torch.no_grad()
def test_intervention_rows_against_a_hand_computation_and_a_neutral_control(tiny_attention):
    model = tiny_attention
    ids = torch.randint(2, 500, (4, 33), generator=torch.Generator().manual_seed(4))
    target = int(ids[0, 5])
    base = baseline(model, ids, target, top_k=10, max_prompts=100, pad_id=1)
    assert len(base.prompts) > 0 and ((ids[:, 1:] == target).nonzero()[:, None] == base.prompts).all(-1).any(0).all()
    layer, head = 1, 0
    row = intervene(model, ids, base, target, Choice("target", layer, head, "L1 H0", "w", "named"), "mask", "w")
    mixer = model.blocks[layer].mixer
    with mixer.intervene([head], "mask"):
        logp = model(ids[:, :-1])[0].log_softmax(-1)
    logp0 = model(ids[:, :-1])[0].log_softmax(-1)
    w, t = base.prompts[:, 0], base.prompts[:, 1]
    dprob = (logp[w, t, target] - logp0[w, t, target]).exp() - 1
    assert row.dprob_mean == pytest.approx(float(dprob.mean()), rel=1e-4)
    assert row.dprob_max == pytest.approx(float(dprob[dprob.abs().argmax()]), rel=1e-4)
    nll = -logp.gather(-1, ids[:, 1:, None]).mean()
    nll0 = -logp0.gather(-1, ids[:, 1:, None]).mean()
    assert row.dppl == pytest.approx(math.expm1(float(nll - nll0)), rel=1e-3, abs=1e-7)
    assert row.n_prompts == len(base.prompts) and row.dppl != 0
    # a neutral control: a head whose output weights are zero changes nothing
    saved = mixer.o_proj.weight.data.clone()
    hd = mixer.head_dim
    mixer.o_proj.weight.data[:, hd : 2 * hd] = 0
    try:
        base = baseline(model, ids, target, top_k=10, max_prompts=100, pad_id=1)
        ctrl = intervene(model, ids, base, target, Choice("neutral", layer, 1, "L1 H1", "", "named"), "mask", "w")
    finally:
        mixer.o_proj.weight.data.copy_(saved)
    assert abs(ctrl.dprob_mean) < 1e-5 and abs(ctrl.dprob_max) < 1e-5 and abs(ctrl.dppl) < 1e-6


# ----------------------------------------------------------------------------------------------- judge and cards


def make_profile(text: str, dead: bool = False) -> UnitProfile:
    return UnitProfile("units", "prototype", 2, 7, {"half_life": 3.0}, 0.9, 0.1, dead, [(" women", 0.5)], [5], 1.0,
                       [Context(f"left {text} ", " women", " right", 0.9), Context("other ", " woman", "", 0.8)])


def test_judge_scores_parse_and_reach_profiles():
    assert judge.parse_scores("DISENTANGLEMENT: 7\nCOVERAGE: 6.5\nTHEMES: 2") == {
        "disentanglement": 7.0, "coverage": 6.5, "themes": 2.0}
    assert judge.parse_scores("**Disentanglement**: 11\nCOVERAGE: 6\nTHEMES: 2") is None  # out of range
    assert judge.parse_scores("DISENTANGLEMENT: 7\nCOVERAGE: 6") is None
    profiles = [make_profile("a"), make_profile("b")]
    replies = iter(["DISENTANGLEMENT: 8\nCOVERAGE: 9\nTHEMES: 1", "no idea"])
    seen = []
    failed = judge.judge_profiles(profiles, lambda prompt: seen.append(prompt) or next(replies))
    assert failed == 1 and profiles[0].scores == {"judge_disentanglement": 8, "judge_coverage": 9, "judge_themes": 1}
    assert profiles[1].scores == {} and "[[ women]]" in seen[0]


class StubJudge:
    """A minimal OpenAI-compatible chat endpoint on loopback that always answers the same scores."""

    def __init__(self, reply: str):
        self.requests = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                stub.requests += 1
                self._send({"id": "x", "object": "chat.completion", "created": 0, "model": "stub", "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_judge_goes_through_the_judge_client_and_its_cache():
    stub = StubJudge("DISENTANGLEMENT: 4\nCOVERAGE: 5\nTHEMES: 3")
    try:
        with judge.endpoint_asker(stub.url, "stub-model", progress=False) as ask:
            profiles = [make_profile("x"), make_profile("x")]  # the same prompt twice: one request, one cache hit
            assert judge.judge_profiles(profiles, ask) == 0
        assert stub.requests == 1
        assert profiles[1].scores["judge_coverage"] == 5 and profiles[1].scores["judge_themes"] == 3
    finally:
        stub.close()


def test_unit_cards_escape_model_text(tmp_path):
    evil = make_profile('<script>alert("x")</script>')
    evil.top_tokens = [("<b>", 1.0)]
    page = cards.write_page(tmp_path / "cards.html", "cards <i>", {"units <x>": [evil, make_profile("ok", True)]},
                            [], ["note <u>"])
    text = page.read_text(encoding="utf-8")
    assert "<script>" not in text and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "<b>" not in text and "<i>" not in text and "<u>" not in text and "<x>" not in text
    assert text.count('class="card') == 2 and text.count('class="card dead"') == 1


# ----------------------------------------------------------------------------------------------- config and CLI


def test_config_is_validated():
    assert InterpConfig(parts="units,null").parts == ("units", "null")
    assert not InterpConfig().judge_url and "toy" not in InterpConfig().parts  # judge and toy are opt-in
    for bad in ({"parts": "units,magic"}, {"parts": ""}, {"profile_splits": "train"}, {"sae_k": 600},
                {"n_contexts": 1}, {"target_unit": "2-7"}, {"judge_url": "ftp://x", "judge_model": "m"},
                {"judge_url": "http://x"}, {"era_bounds": "1900,1800"}, {"toy_lrs": "0"}, {"window": 1},
                {"basis_convention": "mine"}):
        with pytest.raises(ConfigError):
            InterpConfig(**bad)
    assert InterpConfig(**QUICKSTART).parts == ("units", "null", "coverage", "interventions")
    assert InterpConfig().basis_convention == "paper" and InterpConfig(basis_convention="top-k")


SMALL = ["profile_tokens=2048", "window=64", "intervene_tokens=2048", "concept_windows=3", "concept_window=32",
         "random_sets=4", "bootstrap=50", "basis_vocab=64", "basis_sequences=16", "basis_len=32", "max_prompts=32",
         "coverage_units=4"]


SAE_TOY_JUDGE = ["sae_features=64", "sae_k=4", "sae_tokens=4096", "sae_steps=40", "sae_units=4", "toy_vocab=40",
                 "toy_len=16", "toy_samples=8", "toy_steps=3", "toy_early_steps=3", "toy_max_oov=0.9", "toy_lrs=0.5",
                 "judge_model=stub", "judge_units=2"]


def test_cli_end_to_end_reaches_the_leaderboard_and_writes_cards(protot_checkpoint, attention_checkpoint, tmp_path,
                                                                 capsys):
    results = tmp_path / "results"
    stub = StubJudge("DISENTANGLEMENT: 6\nCOVERAGE: 7\nTHEMES: 2")
    try:
        for ckpt, extra in ((protot_checkpoint, [f"basis_checkpoints={protot_checkpoint}"]),
                            (attention_checkpoint, SAE_TOY_JUDGE + [f"judge_url={stub.url}"])):
            parts = "parts=units,null,coverage,interventions,basis" + (",sae,toy" if ckpt == attention_checkpoint else "")
            args = ["eval", "--suite", "interpretability", "--checkpoint", str(ckpt), "--results", str(results),
                    "--no-progress", "--suite-config", parts, *SMALL, *extra]
            assert main(args) == 0
    finally:
        stub.close()
    assert 1 <= stub.requests <= 4 * 2  # judge_units=2 per unit set (units, null, 2 SAE sets); repeats are cached
    capsys.readouterr()
    # the two runs used different suite configs: each is its own column family under --all-configs
    assert main(["leaderboard", "--results", str(results), "--format", "json", "--suite", "interpretability",
                 "--all-configs"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 2
    for row in rows:
        for name in ("coherence", "token_entropy", "dead_frac", "coverage", "dprob_mean/target"):
            (value,) = [c["value"] for column, c in row["cells"].items() if column.endswith(f"/{name}")]
            assert value is not None, name
    runs = sorted((results / "runs").iterdir())
    seen = set()
    for run in runs:
        manifest = json.loads((run / "manifest.json").read_text())
        info = manifest["suite_info"]
        metrics = {json.loads(line)["name"]: json.loads(line)["value"] for line in (run / "metrics.jsonl").open()}
        samples = [json.loads(line) for line in (run / "samples" / "samples.jsonl").open()]
        mixer = "protot" if info["unit_definition"] == "write-gate" else "attention"
        seen.add(mixer)
        units = [s for s in samples if s["kind"] == "unit" and s["unit_set"] == "units"]
        assert len(units) == info["units_profiled"] == info["units_total"]
        assert {s["unit_kind"] for s in units} == {"prototype" if mixer == "protot" else "head"}
        assert any(s["unit_set"] == "null" for s in samples if s["kind"] == "unit")
        roles = {s["role"] for s in samples if s["kind"] == "intervention"}
        assert {"target", "neutral"} <= roles
        assert 0 <= metrics["dead_frac"] <= 1 and -1 <= metrics["coherence"] <= 1
        assert "coherence_null" in metrics and "coverage_null" in metrics and "coherence_random" in metrics
        # coverage over the same number of units for every model and its null (a maximum grows with their number)
        assert info["coverage_units"]["units"] == info["coverage_units"]["null"] == 4
        records = {json.loads(line)["name"]: json.loads(line) for line in (run / "metrics.jsonl").open()}
        assert records["coverage"]["units"] == 4 and records["coverage"]["null"] == "coverage_null"
        assert records["coherence"]["null"] == "coherence_null" and len(records["coverage"]["items"]["ids"]) >= 2
        assert "basis_resid_cos" in metrics and "basis_bigram_cos" in metrics and "basis_embedding_cos_init" in metrics
        assert "basis_kq_cos" in metrics and "basis_kq_query_cos" in metrics  # paper's orientation, query rows
        assert info["basis"]["convention"] == "paper" and info["basis"]["full_vocab"] > info["basis"]["vocab"]
        if mixer == "protot":
            assert "half_life_median" in metrics and "rw_lag_median" in metrics
            assert {"write-mask", "read-mask", "reinit"} == set(info["interventions"]["modes"])
            assert not any(k.startswith(("judge_", "toy_")) or "_sae_" in k for k in metrics)  # all opt-in
            # a kept checkpoint of the same run (here: the final one again) is compared like the scored model
            step = [s["step"] for s in samples if s["kind"] == "basis" and s["model"].startswith("step")]
            assert len(step) == 1 and metrics[f"basis_resid_cos_step{step[0]}"] == metrics["basis_resid_cos"]
        else:  # the SAE baseline, the judge through the judge client and the toy curve
            assert 0 <= metrics["sae_fvu"] < 1 and "coherence_sae_var" in metrics and "coverage_sae_freq" in metrics
            assert metrics["judge_coverage"] == 7 and metrics["judge_themes_null"] == 2
            assert metrics["judge_disentanglement_sae_var"] == 6
            assert info["judge"]["unparsed_replies"] == 0
            assert metrics["toy_cos_wo_min"] > 0.99 and (run / "plots" / "toy_leading_terms.png").stat().st_size > 0
        html = (run / "plots" / "unit_cards.html").read_text(encoding="utf-8")
        assert html.count('class="card') == len([s for s in samples if s["kind"] == "unit"])
        assert "<h2>Interventions</h2>" in html and "<script" not in html
    assert seen == {"protot", "attention"}


def test_bad_config_fails_before_any_work(attention_checkpoint, tmp_path, capsys):
    args = ["eval", "--suite", "interpretability", "--checkpoint", str(attention_checkpoint), "--results",
            str(tmp_path / "r"), "--no-progress", "--suite-config"]
    assert main([*args, "intervene_modes=write-mask"]) != 0
    assert "include none of the modes" in capsys.readouterr().err
    assert main([*args, "window=4096"]) != 0
    assert "longer than the model's context" in capsys.readouterr().err


@torch.no_grad()
@pytest.mark.parametrize("name", ["attention", "mamba", "mamba2", "deltanet", "gated-deltanet"])
def test_projected_contributions_equal_masked_reruns_for_every_kernel(name):
    """More windows than one batch (a short last batch), every kernel: a kernel that feeds its output projection
    another layout (time-major) must not pass, nor crash on the last batch."""
    from harness.model.backbone import build_model
    from harness.config import BackboneConfig, ModelSpec
    from suites.interpretability.activations import BATCH_WINDOWS

    model = build_model(ModelSpec(name, {}, BackboneConfig(32, 1, 16, 64)), seed=0).eval()
    mixer = model.blocks[0].mixer
    x = torch.randn(BATCH_WINDOWS + 3, 9, 32, generator=torch.Generator().manual_seed(0))
    units = [0, len(mixer.units()) - 1]
    for kernel in mixer.kernels:
        try:
            mixer.set_kernel(kernel)
            mixer(x[:1])
        except Exception:  # a kernel this machine cannot run (CUDA-only)
            continue
        fast = projected_contributions(mixer, x, units)
        slow = contributions(mixer, x, units)
        assert fast is not None and fast[0].shape == (len(x), 9), kernel
        for a, b in zip(fast, slow, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5, msg=f"{name}/{kernel}")
