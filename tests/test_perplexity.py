"""The perplexity suite against a per-document loop computed independently of its batching and windows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.model.checkpoint import load_model
from harness.corpus.data import load_corpus
from harness.suite import SuiteContext
from suites.perplexity import Perplexity, PerplexityConfig, position_buckets


def reference_totals(model, corpus, split: str, context: int):
    """Score each document one window at a time (batch 1, no padding): per-doc NLL, tokens and bytes."""
    docs = corpus.encode_split(split)
    byte_len = corpus.tokenizer.token_byte_lengths()
    out = []
    for doc in docs:
        ids = torch.from_numpy(doc.ids.astype(np.int64))
        nll, n = 0.0, 0
        for start in range(0, len(ids) - 1, context):
            window = ids[start : start + context + 1]
            logits, _ = model(window[None, :-1])
            nll += F.cross_entropy(logits[0].double(), window[1:], reduction="sum").item()
            n += len(window) - 1
        out.append((nll, n, int(byte_len[doc.ids[1:]].sum())))
    return out


@pytest.fixture(scope="module")
def scored(protot_checkpoint):
    model, ckpt = load_model(protot_checkpoint)
    corpus = load_corpus(ckpt.spec.data, progress=False)
    cfg = PerplexityConfig(splits=("test",), batch_size=3, bootstrap=200)
    result = Perplexity(cfg).run(model, SuiteContext(corpus, work_dir=None, progress=False))
    return model, corpus, {m.name: m for m in result.metrics}


@torch.no_grad()
def test_token_weighted_ppl_and_bpb_match_the_reference(scored):
    model, corpus, metrics = scored
    ref = reference_totals(model, corpus, "test", model.config.context)
    nll, tokens, nbytes = (sum(col) for col in zip(*ref))
    assert metrics["ppl"].value == pytest.approx(math.exp(nll / tokens), rel=1e-5)
    assert metrics["bpb"].value == pytest.approx(nll / math.log(2) / nbytes, rel=1e-5)
    assert metrics["ppl"].n == tokens
    # bytes of the targets are exactly the documents' UTF-8 bytes (end-of-text targets carry none)
    assert nbytes == sum(d.n_bytes for d in corpus.encode_split("test"))
    assert metrics["ppl"].ci_low < metrics["ppl"].value < metrics["ppl"].ci_high


def test_unigram_floor_uses_the_same_targets(scored):
    _, corpus, metrics = scored
    logp = corpus.unigram_logprobs()
    targets = np.concatenate([d.ids[1:] for d in corpus.encode_split("test")])
    assert metrics["unigram_ppl"].value == pytest.approx(math.exp(-logp[targets].mean()), rel=1e-9)
    assert metrics["ppl"].value < metrics["unigram_ppl"].value


def test_position_buckets_partition_the_targets(scored):
    _, _, metrics = scored
    buckets = [m for name, m in metrics.items() if name.startswith("ppl_pos_")]
    assert [m.name for m in buckets] == [f"ppl_pos_{a}-{b - 1}" for a, b in position_buckets(128)]
    assert sum(m.n for m in buckets) == metrics["ppl"].n
    pooled = sum(m.n * math.log(m.value) for m in buckets) / metrics["ppl"].n
    assert math.exp(pooled) == pytest.approx(metrics["ppl"].value, rel=1e-9)


def test_batch_mean_is_the_papers_definition(scored):
    model, corpus, metrics = scored
    windows = corpus.eval_windows("test", model.config.context)
    means = []
    with torch.no_grad():
        for i in range(0, len(windows), 3):
            nll, n = 0.0, 0
            for w in windows[i : i + 3]:
                ids = torch.from_numpy(w.ids.astype(np.int64))
                nll += F.cross_entropy(model(ids[None, :-1])[0][0].double(), ids[1:], reduction="sum").item()
                n += len(ids) - 1
            means.append(nll / n)
    assert metrics["ppl_batch_mean"].value == pytest.approx(math.exp(np.mean(means)), rel=1e-5)


def test_buckets():
    assert position_buckets(256) == [(0, 16), (16, 32), (32, 64), (64, 128), (128, 256)]
    assert position_buckets(100) == [(0, 16), (16, 32), (32, 64), (64, 100)]
