"""The long-context suite against independent references: bucket sums from a closed-form per-position NLL, and
retrieval tasks that a context-free model and a cheater (reading the teacher-forced answer) score at chance while
a model that copies from the context scores ~1. Hand-built models and a tiny BPE: seconds."""

from __future__ import annotations

import html
import math
import string
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from harness.config import BackboneConfig, ModelSpec
from harness.corpus.data import Corpus, EncodedDoc
from harness.corpus.tokenizer import train_bpe
from harness.errors import ConfigError
from harness.model.backbone import build_model
from harness.registry import SUITES
from harness.stats import wilson_interval
from harness.suite import SuiteContext
from suites.long_context import LongContext, LongContextConfig
from suites.long_context.position import long_buckets
from suites.long_context.retrieval import candidate_loglik, correct
from suites.long_context.tasks import DEPTH_TASKS, TASKS, TaskSettings, Vocabulary, make_grid

V, C, SLOPE = 24, 32, 0.05


class PositionModel(nn.Module):
    """Logit ``SLOPE * t`` on the current token at position ``t``, 0 elsewhere: the NLL of a target is known in
    closed form (:func:`closed_form_nll`). Causal; reads past ``C`` only when ``extrapolates``."""

    def __init__(self, extrapolates: bool):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(context=C, vocab_size=V)
        self.extrapolates = extrapolates

    def check_context(self, length: int) -> None:
        if length > C and not self.extrapolates:
            raise ConfigError(f"a context of {length} tokens is longer than this model supports ({C})")

    def forward(self, ids, states=None, targets=None):
        t = torch.arange(ids.shape[1], dtype=torch.float32)
        logits = torch.zeros(*ids.shape, V) + self.w
        logits.scatter_(-1, ids[..., None], (SLOPE * t).expand(ids.shape)[..., None])
        return logits, None


def closed_form_nll(x: int, y: int, t: int) -> float:
    z = math.log(V - 1 + math.exp(SLOPE * t))
    return z - SLOPE * t if x == y else z


class TokenCorpus:
    """Documents of token ids, windowed by :meth:`Corpus.eval_windows` itself."""

    eval_windows = Corpus.eval_windows

    def __init__(self, docs: list[np.ndarray]):
        self.docs = [EncodedDoc(f"doc{i}", d.astype(np.int32), len(d)) for i, d in enumerate(docs)]
        self.tokenizer = SimpleNamespace(pad_id=0)

    def encode_split(self, split: str) -> list[EncodedDoc]:
        return self.docs


def _docs() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(1, V, n) for n in (150, 90, 301, 20)]


def _run(model, cfg: LongContextConfig, corpus) -> dict:
    result = LongContext(cfg).run(model, SuiteContext(corpus, work_dir=Path("."), progress=False))
    return {m.name: m for m in result.metrics}


def test_buckets_match_a_naive_loop_over_a_closed_form_nll():
    docs = _docs()
    factor = 4
    buckets = long_buckets(C, factor)
    assert buckets == [(0, 16), (16, 32), (32, 64), (64, 128)]
    assert long_buckets(100, 8) == [(0, 16), (16, 32), (32, 64), (64, 100), (100, 200), (200, 400), (400, 800)]
    sums = np.zeros((len(docs), len(buckets)))
    counts = np.zeros_like(sums)
    gain = 0.0  # past C: NLL at its position in the long window minus NLL with the context restarted every C
    for d, ids in enumerate(docs):  # windows of factor*C targets, consecutive ones sharing one token
        for start in range(0, len(ids) - 1, factor * C):
            window = ids[start:start + factor * C + 1]
            for t in range(len(window) - 1):
                b = next(i for i, (lo, hi) in enumerate(buckets) if lo <= t < hi)
                sums[d, b] += closed_form_nll(window[t], window[t + 1], t)
                counts[d, b] += 1
                if t >= C:
                    gain += closed_form_nll(window[t], window[t + 1], t) - closed_form_nll(window[t], window[t + 1],
                                                                                           t % C)
    cfg = LongContextConfig(factor=factor, tasks=(), bootstrap=200, batch_size=3)
    metrics = _run(PositionModel(True), cfg, TokenCorpus(docs))
    for b, (lo, hi) in enumerate(buckets):
        m = metrics[f"nll_pos_{lo}-{hi - 1}"]
        assert m.value == pytest.approx(sums[:, b].sum() / counts[:, b].sum(), rel=1e-6)  # float32 logits
        assert m.n == counts[:, b].sum() and m.role == "diagnostic" and m.unreliable is None
        use = counts[:, b] > 0
        assert m.items.ids == tuple(f"doc{d}" for d in np.flatnonzero(use))
        assert np.allclose(m.items.values, sums[use, b] / counts[use, b], rtol=1e-6) and m.items.unit == "nats/token"
        assert m.interval.low <= m.value <= m.interval.high
    far = sums[:, 2:].sum() / counts[:, 2:].sum()
    near = sums[:, 1].sum() / counts[:, 1].sum()
    assert metrics["extrapolation"].value == pytest.approx(far - near, rel=1e-6)  # float32 logits
    assert metrics["far_context_gain"].value == pytest.approx(gain / counts[:, 2:].sum(), rel=1e-5)
    assert metrics["far_context_gain"].n == counts[:, 2:].sum()
    # the logit grows with t, so a repeated token is ever cheaper and every other ever dearer: the loss rises here
    # (random ids repeat 1 time in 23), and no bucket falls below the one before
    assert metrics["context_used"].value == 16

    refused = _run(PositionModel(False), cfg, TokenCorpus(docs))
    for lo, hi in buckets:
        name = f"nll_pos_{lo}-{hi - 1}"
        if hi <= C:  # the same targets with the same context: identical, and paired on the same documents
            assert refused[name].value == metrics[name].value and refused[name].items == metrics[name].items
        else:
            assert math.isnan(refused[name].value) and refused[name].unreliable.startswith("not measured")
            assert "longer than this model supports" in refused[name].unreliable
    for name in ("extrapolation", "far_context_gain"):
        assert math.isnan(refused[name].value) and refused[name].unreliable.startswith("not measured")
    opted = _run(PositionModel(False), LongContextConfig(factor=factor, tasks=(), bootstrap=200,
                                                         past_training="score"), TokenCorpus(docs))
    assert opted["nll_pos_64-127"].value == metrics["nll_pos_64-127"].value
    assert "opt-in" in opted["nll_pos_64-127"].unreliable and opted["nll_pos_0-15"].unreliable is None


# ---------------------------------------------------------------------------------------------- retrieval

FILLER = ("The committee met in the spring and spoke of roads, rivers and the harvest of the western states. "
          "Nobody could say when the bridge would open, but everyone agreed it should. ") * 40


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> Vocabulary:
    tok = train_bpe([FILLER, "pass key special magic number let then code apple river " * 5], 300,
                    tmp_path_factory.mktemp("bpe"))
    filler = [np.asarray(tok.encode(FILLER + " 1999 and 2024 were years."), dtype=np.int64)]
    return Vocabulary(tok, filler)


SETTINGS = TaskSettings(k=4, key_digits=5, hops=1)


def _grid(vocab: Vocabulary, tasks=TASKS, per_cell: int = 4, seed: int = 0, lengths=(200,)):
    return make_grid(vocab, vocab.filler, tasks, lengths, (0.0, 0.5, 1.0), per_cell, seed, SETTINGS)


def test_the_generator_is_deterministic_and_no_answer_is_in_the_filler(vocab):
    a, b, c = _grid(vocab), _grid(vocab), _grid(vocab, seed=1)
    assert [e.id for e in a] == [e.id for e in b] and len({e.id for e in a}) == len(a)
    assert all(np.array_equal(x.prefix, y.prefix) and np.array_equal(x.candidates, y.candidates)
               and x.answer == y.answer for x, y in zip(a, b))
    assert any(not np.array_equal(x.prefix, y.prefix) for x, y in zip(a, c))
    assert not np.isin(vocab.filler, vocab.digit_tokens).any()  # "1999" and "2024" were removed
    assert len(vocab.filler) > 1000 and len(vocab.digits) == len(set(vocab.digits)) == 10
    for e in a:
        assert len(e.prefix) + e.candidates.shape[1] == e.length and e.prefix[0] == vocab.bos
        digits = e.prefix[np.isin(e.prefix, vocab.digits)]
        true = e.candidates[e.answer]
        if e.task in ("passkey", "niah_single"):  # the only digits of the example are the true key's
            assert np.array_equal(digits, true)
        if e.task in ("niah_multikey", "variable_tracking", "frequent_words"):  # every candidate is in context
            text = digits.tolist()
            for cand in e.candidates:
                assert any(text[i:i + len(cand)] == cand.tolist() for i in range(len(text)))
    # the true candidate sits at every row about equally often: a tie (no information) scores 1/k
    rows = np.bincount([e.answer for e in a], minlength=4)
    assert rows.min() > 0 and rows.sum() == len(a)


class ContextFree(nn.Module):
    """Logits from the current token alone (a fixed random bigram table): sees nothing of the context."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab_size, vocab_size, generator=torch.Generator().manual_seed(0)))

    def forward(self, ids, states=None):
        return self.table[ids], None


class Cheater(nn.Module):
    """Reads the next input token (where the answer is teacher-forced) and predicts it with certainty."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, ids, states=None):
        nxt = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)
        return 20.0 * nn.functional.one_hot(nxt, self.vocab_size).float() + self.w, None


class Copier(nn.Module):
    """An induction head by hand: at position t, the token that followed the earlier position whose preceding
    tokens match those up to t for longest (up to 8; the latest on ties). Reads the context (causally) and knows
    nothing of the tasks."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, ids, states=None):
        logits = torch.zeros(*ids.shape, self.vocab_size) + self.w
        for b, row in enumerate(ids.numpy()):
            for t in range(1, len(row)):
                best, at = 0, -1
                for s in np.flatnonzero(row[:t] == row[t])[::-1]:
                    n = 1
                    while n < 8 and s - n >= 0 and row[s - n] == row[t - n]:
                        n += 1
                    if n > best:
                        best, at = n, s
                if at >= 0:
                    logits[b, t, row[at + 1]] = 10.0
        return logits, None


def _accuracy(model, examples) -> tuple[float, object]:
    hits = correct(examples, candidate_loglik(model, examples, batch_rows=16))
    return hits.mean(), wilson_interval(int(hits.sum()), len(hits))


def test_a_context_free_model_and_a_cheater_score_chance(vocab):
    examples = _grid(vocab, per_cell=24)  # 5 tasks x 3 depths x 24
    size = vocab.tokenizer.vocab_size
    for model in (ContextFree(size), Cheater(size)):
        acc, interval = _accuracy(model, examples)
        assert interval.low <= 0.25 <= interval.high, (type(model).__name__, acc)
    # the cheater does read the answer: every answer token but the last (past its input) costs it nothing, the
    # last ~20 nats (~0 where it repeats the one before); five blind digits would cost ~100
    ll = candidate_loglik(Cheater(size), examples[:40], batch_rows=16)
    assert np.all((ll > -1e-3) | (np.abs(ll + 20) < 1e-3))


def test_a_model_that_copies_from_the_context_finds_the_key(vocab):
    examples = _grid(vocab, tasks=("passkey", "niah_single", "niah_multikey"), per_cell=3)
    hits = correct(examples, candidate_loglik(Copier(vocab.tokenizer.vocab_size), examples, batch_rows=16))
    assert hits.mean() >= 0.95, {t: hits[[e.task == t for e in examples]].mean() for t in TASKS}


@pytest.fixture(scope="module")
def tiny_attention(vocab):
    """The whole suite on an untrained one-layer attention model at context 128 (refused past it)."""
    tok = vocab.tokenizer
    spec = ModelSpec("attention", {}, BackboneConfig(d_model=32, n_layers=1, context=128, vocab_size=tok.vocab_size))
    model = build_model(spec, seed=0)
    docs = [np.asarray(tok.encode(FILLER[i * 400:]), dtype=np.int64) for i in range(3)]
    corpus = TokenCorpus([np.concatenate([[tok.bos_id], d]) for d in docs])
    corpus.tokenizer = tok
    corpus.train_tokens = np.concatenate(docs)
    cfg = LongContextConfig(factor=2, bootstrap=50, tasks=("passkey", "frequent_words"), lengths=(1.0, 2.0),
                            depths=(0.0, 1.0), examples=2, finetune_steps=2, finetune_batch=2)
    return LongContext(cfg).run(model, SuiteContext(corpus, work_dir=Path("."), progress=False))


def test_the_suite_scores_a_tiny_attention_model_zero_shot_and_fine_tuned(tiny_attention):
    metrics = {m.name: m for m in tiny_attention.metrics}
    for phase in ("zs", "ft"):
        score = metrics[f"retrieval_{phase}"]
        assert score.role == "score" and score.chance == 0.25 and score.perfect == 1.0
        assert score.n == 2 * 2 + 2 * 2 and len(score.items) == score.n  # within the context only
        assert score.interval.kind == "wilson" and set(score.items.values) <= {0.0, 1.0}
        assert metrics[f"{phase}_L128"].n == score.n
        beyond = metrics[f"{phase}_L256"]  # attention may not read 256 tokens: reported, not dropped
        assert math.isnan(beyond.value) and beyond.unreliable.startswith("not measured")
    assert math.isnan(metrics["nll_pos_128-255"].value)
    assert {m.name for m in metrics.values() if m.role == "score"} == {"retrieval_zs", "retrieval_ft"}


def test_config_limits_and_registration():
    entry = SUITES.get("long-context")
    assert entry.cls is LongContext and entry.cls.scope == "model"
    cfg = entry.make_config(dict(entry.cls.quickstart))
    assert cfg.finetune_steps == 0 and cfg.tasks == ("passkey", "niah_multikey")
    with pytest.raises(ConfigError):
        LongContextConfig(lengths=(1.0, 1.0))
    assert set(DEPTH_TASKS) < set(TASKS) and all(c in string.digits for c in "0123456789")


def test_the_gpu_plan_is_valid():
    from harness.running.plan import load_plan

    plan = load_plan(Path(__file__).resolve().parents[1] / "plans" / "long-context-gpu.yaml", check=False)
    assert "long-context" in plan.suites
    SUITES.get("long-context").make_config(plan.suite_configs.get("long-context"))


class Kit:
    """The site kit's contract (harness.suite.SiteKit) in a few lines: every helper escapes."""

    def escape(self, value):
        return html.escape(str(value))

    def table(self, header, rows, caption=""):
        cells = lambda r, tag: "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in r)  # noqa: E731
        return (f"<table><caption>{html.escape(caption)}</caption><tr>{cells(header, 'th')}</tr>"
                + "".join(f"<tr>{cells(r, 'td')}</tr>" for r in rows) + "</table>")

    def model_label(self, run):
        return html.escape(f"{run.manifest.subject.label} / {run.manifest.subject.preset}")

    def newest_per_model(self, runs):
        return list(runs)

    def suite_link(self, suite, text):
        return f'<a href="{suite}.html">{html.escape(text)}</a>'


def test_the_site_section_shows_the_buckets_the_difference_from_none_and_the_grid(tiny_attention):
    from harness.store.results import RunRecord
    from planted import control, manifest, subject

    docs = _docs()
    none = _run(PositionModel(True), LongContextConfig(factor=4, tasks=(), bootstrap=20), TokenCorpus(docs))
    runs = [RunRecord("a", manifest("long-context", subject("attention<b>"), suite_info=tiny_attention.info),
                      tiny_attention.metrics),
            RunRecord("n", manifest("long-context", control("none")), list(none.values()))]
    page = LongContext.site_section(runs, Kit())
    assert "<h2>Loss by position</h2>" in page and "<h2>Retrieval</h2>" in page
    assert "attention&lt;b&gt;" in page and "attention<b>" not in page
    assert "difference from the context-free control" in page and "not measured" in page
    assert page.count("depth 0</th>") == 2 and "passkey" in page and "frequent_words" in page  # zs and ft grids
    # the cost side is linked, not remeasured: each length's decode state (attention's KV cache grows with it)
    state = tiny_attention.info["decode_state"]
    assert {"128", "256"} <= set(state) and state["256"] == 2 * state["128"] > 0
    assert "Decode cost at these lengths" in page and f"{state['256']:,}" in page
    assert '<a href="throughput.html">throughput suite</a>' in page
    hostile = dict(tiny_attention.info, decode_state={"<b>": 1, "64": "x", "32": True, "16": 7})
    runs[0] = RunRecord("a", manifest("long-context", subject("attention<b>"), suite_info=hostile),
                        tiny_attention.metrics)
    page = LongContext.site_section(runs, Kit())
    assert "after 16</th>" in page and "after 64" not in page and "after 32" not in page  # malformed entries left out


def test_the_published_site_links_another_suites_page_and_escapes_the_text():
    from types import SimpleNamespace

    from harness.reporting.publish import Kit as SiteKit

    kit = SiteKit(SimpleNamespace(suite_files={"throughput": "throughput.html"}), depth=1)
    assert kit.suite_link("throughput", "speed <b>") == '<a href="../suites/throughput.html">speed &lt;b&gt;</a>'
    assert kit.suite_link("not-run", "speed <b>") == "speed &lt;b&gt;"
