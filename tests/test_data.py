"""harness.corpus.data and harness.corpus.tokenizer: splits, tokenizer cache, batches, eval windows, local/hub loading."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from harness.config import DataConfig
from harness.corpus.data import SPLITS, Corpus, Document, load_corpus, load_documents
from harness.errors import MixbenchError
from harness.corpus.tokenizer import Tokenizer, train_bpe

UNICODE = [
    "naïve café — Ünïcödé",
    "日本語のテキスト 🙂👍🏽",
    "e\u0301 \u200d\t tabs\r\n",
    "a<|endoftext|>b <|pad|>",
    "",
]


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No network and a private datasets cache: the hub must fail fast, local files must not touch ~/.cache."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return load_corpus(DataConfig(vocab_size=400, max_train_docs=12), tmp_path_factory.mktemp("cache"), progress=False)


@pytest.fixture(scope="module")
def toy_tokenizer(tmp_path_factory):
    texts = ["the cat sat on the mat. " * 10, "The dog ate the bone; the cat did not. " * 10] + UNICODE
    return train_bpe(texts, 300, tmp_path_factory.mktemp("tok"))


def toy_corpus(tokenizer: Tokenizer, train_tokens: np.ndarray, validation: tuple[str, ...] = ()) -> Corpus:
    docs = {s: [] for s in SPLITS}
    docs["train"] = [Document("train/0", "x", "toy")]
    docs["validation"] = [Document(f"validation/{i}", text, "toy") for i, text in enumerate(validation)]
    return Corpus(DataConfig(), docs, tokenizer, train_tokens.astype(np.int32), "toy", progress=False)


def year(doc_id: str) -> int:
    return int(re.match(r"sotu/(\d{4})_", doc_id).group(1))


# ------------------------------------------------------------------------------------------------ splits


def test_embedded_split_rule():
    docs = load_documents(DataConfig())
    ids = {s: [d.id for d in docs[s]] for s in SPLITS}
    flat = [i for s in SPLITS for i in ids[s]]
    assert len(flat) == len(set(flat)) == 233 + 500 + 42 + 66 + 135
    assert {d.source for d in docs["train"]} == {"sotu", "brown", "shakespeare", "kjv"}
    assert all(year(i) < 2000 for i in ids["train"] if i.startswith("sotu/"))
    held = ids["validation"] + ids["test"]
    assert all(i.startswith("sotu/") and year(i) >= 2000 for i in held) and len(held) == 22
    assert abs(len(ids["validation"]) - len(ids["test"])) <= 1
    assert {d.source for s in ("validation_ood", "test_ood") for d in docs[s]} == {"moby_dick"}
    assert len(ids["validation_ood"]) + len(ids["test_ood"]) == 135
    assert ids["validation_ood"][:2] == ["moby_dick/chapter_1", "moby_dick/chapter_3"]
    assert ids["test_ood"][0] == "moby_dick/chapter_2"
    assert docs["validation"][0].meta["year"] == 2000 and "party" in docs["validation"][0].meta
    assert load_documents(DataConfig()) == docs  # deterministic


def test_max_train_docs_is_a_stable_subset():
    full = load_documents(DataConfig())
    capped = load_documents(DataConfig(max_train_docs=25))
    assert len(capped["train"]) == 25
    assert set(d.id for d in capped["train"]) <= set(d.id for d in full["train"])
    assert capped == load_documents(DataConfig(max_train_docs=25))
    assert all(capped[s] == full[s] for s in SPLITS[1:])


def test_corpus_records_splits(corpus):
    ids = corpus.split_doc_ids()
    assert list(ids) == list(SPLITS)
    assert ids["train"] == [d.id for d in corpus.documents["train"]] and len(ids["train"]) == 12


# --------------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_round_trip_and_specials(toy_tokenizer, tmp_path):
    tok = toy_tokenizer
    assert (tok.eos_id, tok.pad_id) == (0, 1) and tok.vocab_size == 300
    for text in UNICODE:
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode_batch(UNICODE) == [tok.encode(t) for t in UNICODE]
    assert 0 not in tok.encode("a<|endoftext|>b")  # literal specials in text stay text
    lengths = tok.token_byte_lengths()
    assert lengths.shape == (tok.vocab_size,) and lengths[tok.eos_id] == lengths[tok.pad_id] == 0
    assert [int(lengths[tok.encode(t)].sum()) for t in UNICODE] == [len(t.encode("utf-8")) for t in UNICODE]
    tok.save(tmp_path / "t.json")
    again = Tokenizer.load(tmp_path / "t.json")
    assert again.fingerprint == tok.fingerprint and again.encode(UNICODE[1]) == tok.encode(UNICODE[1])


def test_tokenizer_file_errors(tmp_path):
    with pytest.raises(MixbenchError, match="does not exist"):
        Tokenizer.from_file(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(MixbenchError, match="could not be read"):
        Tokenizer.load(tmp_path / "bad.json")


def test_bpe_is_cached_and_deterministic(tmp_path, monkeypatch):
    texts = ["alpha beta gamma delta " * 50, "epsilon zeta eta theta " * 50]
    first = train_bpe(texts, 300, tmp_path / "a")
    (cached,) = (tmp_path / "a" / "tokenizers").glob("*.json")
    mtime = cached.stat().st_mtime_ns
    assert train_bpe(texts, 300, tmp_path / "b").to_str() == first.to_str()  # fresh training, same JSON

    import harness.corpus.tokenizer

    def no_training(*args, **kwargs):
        raise AssertionError("retrained despite a cached tokenizer")

    monkeypatch.setattr(harness.corpus.tokenizer.trainers, "BpeTrainer", no_training)
    second = train_bpe(iter(texts), 300, tmp_path / "a")
    assert second.fingerprint == first.fingerprint and cached.stat().st_mtime_ns == mtime
    with pytest.raises(AssertionError):
        train_bpe(texts, 301, tmp_path / "a")  # another vocab size is another key


def test_corpus_cache_hit(corpus, tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "corpus-cache"
    cfg = DataConfig(vocab_size=400, max_train_docs=12)
    cold = load_corpus(cfg, cache, progress=False)
    warm = load_corpus(cfg, cache, progress=False)
    assert cold.fingerprint == warm.fingerprint == corpus.fingerprint
    assert np.array_equal(warm.train_tokens, corpus.train_tokens)
    other = load_corpus(DataConfig(vocab_size=400, max_train_docs=13), cache, progress=False)
    assert other.fingerprint != cold.fingerprint


# ----------------------------------------------------------------------------------------- token views


def test_train_stream_is_docs_then_eos(corpus):
    tok, docs = corpus.tokenizer, corpus.documents["train"]
    expected = np.concatenate([np.r_[tok.encode(d.text), tok.eos_id] for d in docs])
    assert corpus.train_tokens.dtype == np.int32 and np.array_equal(corpus.train_tokens, expected)


def test_train_batch_depends_on_seed_and_step_only(corpus, toy_tokenizer):
    a = corpus.train_batch(step=3, batch_size=4, context=32, seed=7)
    assert a.shape == (4, 33) and str(a.dtype) == "torch.int64"
    assert (a == corpus.train_batch(3, 4, 32, 7)).all()
    assert not (a == corpus.train_batch(4, 4, 32, 7)).all()
    assert not (a == corpus.train_batch(3, 4, 32, 8)).all()
    toy = toy_corpus(toy_tokenizer, np.arange(100))
    rows = toy.train_batch(0, 16, 9, 0).numpy()
    assert (np.diff(rows, axis=1) == 1).all() and rows.max() <= 99  # contiguous windows inside the stream
    toy.train_batch(0, 2, 99, 0)  # exactly fits
    with pytest.raises(MixbenchError, match="fewer than context"):
        toy.train_batch(0, 2, 100, 0)


def check_windows_cover_targets(corpus: Corpus, split: str, context: int) -> None:
    encoded = corpus.encode_split(split)
    windows = corpus.eval_windows(split, context)
    assert [(w.doc_index, w.start) for w in windows] == sorted((w.doc_index, w.start) for w in windows)
    rebuilt = {}
    for w in windows:
        assert 2 <= len(w.ids) <= context + 1
        part = rebuilt.setdefault(w.doc_index, [w.ids[:1]])
        assert sum(len(p) for p in part) == w.start + 1  # consecutive windows share exactly one token
        part.append(w.ids[1:])
    assert sorted(rebuilt) == list(range(len(encoded)))
    for i, doc in enumerate(encoded):
        assert np.array_equal(np.concatenate(rebuilt[i]), doc.ids)  # every target exactly once, in order


@pytest.mark.parametrize("context", [1, 2, 3, 7])
def test_eval_windows_cover_every_target_once(toy_tokenizer, context):
    texts = tuple("the cat sat " * k + UNICODE[k % 4] for k in range(12))
    check_windows_cover_targets(toy_corpus(toy_tokenizer, np.arange(10), texts), "validation", context)


def test_eval_windows_on_real_documents(corpus):
    check_windows_cover_targets(corpus, "validation_ood", 256)


def test_encoded_docs(corpus):
    docs, tok = corpus.documents["test"], corpus.tokenizer
    encoded = corpus.encode_split("test")
    assert corpus.encode_split("test") is encoded
    with pytest.raises(MixbenchError, match="unknown split 'valid'"):
        corpus.encode_split("valid")
    assert [e.doc_id for e in encoded] == [d.id for d in docs]
    for doc, enc in zip(docs, encoded, strict=True):
        assert enc.ids.dtype == np.int32 and list(enc.ids) == [tok.eos_id, *tok.encode(doc.text), tok.eos_id]
        assert enc.n_bytes == len(doc.text.encode("utf-8")) == tok.token_byte_lengths()[enc.ids].sum()


def test_eval_windows_subset(corpus):
    full = corpus.eval_windows("validation", 64)
    sub = corpus.eval_windows("validation", 64, max_windows=10)
    assert len(sub) == 10 and (sub[0].doc_index, sub[0].start) == (0, 0)
    keys = [(w.doc_index, w.start) for w in full]
    positions = [keys.index((w.doc_index, w.start)) for w in sub]
    assert positions == sorted(set(positions)) and max(np.diff(positions)) - min(np.diff(positions)) <= 1
    assert [(w.doc_index, w.start) for w in corpus.eval_windows("validation", 64, max_windows=10)] == [
        keys[p] for p in positions
    ]
    assert len(corpus.eval_windows("validation", 64, max_windows=10**9)) == len(full)


def test_unigram_logprobs(corpus, toy_tokenizer):
    assert np.isclose(np.exp(corpus.unigram_logprobs()).sum(), 1.0)
    stream = np.array([0, 2, 2, 3, 0, 2])
    toy = toy_corpus(toy_tokenizer, stream)
    vocab = toy_tokenizer.vocab_size
    for alpha in (1.0, 0.5):
        lp = toy.unigram_logprobs(alpha)
        assert lp.shape == (vocab,) and np.isclose(np.exp(lp).sum(), 1.0)
        denom = len(stream) + alpha * vocab
        assert np.allclose(np.exp(lp[:4]), (np.array([2, 0, 3, 1]) + alpha) / denom)
        assert np.allclose(lp[4:], np.log(alpha / denom))


# ------------------------------------------------------------------------------------------- local / hub


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_local_jsonl_file_hash_split(tmp_path):
    rows = [{"body": f"document number {i} — with text", "n": i} for i in range(250)] + [{"body": "  ", "n": -1}]
    write_jsonl(tmp_path / "docs.jsonl", rows)
    cfg = DataConfig(source=str(tmp_path / "docs.jsonl"), text_field="body")
    docs = load_documents(cfg)
    sizes = {s: len(docs[s]) for s in SPLITS}
    assert sizes == dict(train=246, validation=2, test=2, validation_ood=0, test_ood=0)  # 98/1/1, blank dropped
    ids = [d.id for s in SPLITS for d in docs[s]]
    assert len(set(ids)) == 250 and docs["validation"][0].meta["n"] >= 0
    assert load_documents(cfg) == docs
    with pytest.raises(MixbenchError, match="no column 'text'"):
        load_documents(DataConfig(source=str(tmp_path / "docs.jsonl")))


def test_local_txt_paragraphs_and_corpus(tmp_path):
    paragraphs = [f"Paragraph {i} says hello\nacross two lines, café {i}." for i in range(40)]
    (tmp_path / "book.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    cfg = DataConfig(source=str(tmp_path / "book.txt"), vocab_size=300)
    corpus = load_corpus(cfg, tmp_path / "cache", progress=False)
    docs = corpus.documents
    assert sorted(d.text.strip() for s in SPLITS for d in docs[s]) == sorted(paragraphs)
    assert len(docs["validation"]) == len(docs["test"]) == 1
    assert corpus.tokenizer.decode(corpus.encode_split("validation")[0].ids[1:-1]) == docs["validation"][0].text


def test_local_gzipped_jsonl(tmp_path):
    with gzip.open(tmp_path / "d.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": f"gz row {i}"}) + "\n" for i in range(5))
    docs = load_documents(DataConfig(source=str(tmp_path / "d.jsonl.gz")))
    assert sorted(d.text for s in SPLITS for d in docs[s]) == [f"gz row {i}" for i in range(5)]


def test_local_parquet_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"text": [f"row {i}" for i in range(10)], "label": list(range(10))})
    pq.write_table(table, tmp_path / "d.parquet")
    docs = load_documents(DataConfig(source=str(tmp_path / "d.parquet")))
    assert sum(len(docs[s]) for s in SPLITS) == 10 and len(docs["validation"]) == 1


def test_local_folder_with_named_splits(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": f"train doc {i}"} for i in range(120)])
    write_jsonl(tmp_path / "validation.jsonl", [{"text": f"validation doc {i}"} for i in range(3)])
    docs = load_documents(DataConfig(source=str(tmp_path)))
    assert [d.text for d in docs["validation"]] == [f"validation doc {i}" for i in range(3)]
    assert len(docs["test"]) == 1 and docs["test"][0].text.startswith("train doc")  # missing test carved from train
    assert len(docs["train"]) == 119 and docs["validation"][0].id == "validation/0"
    (tmp_path / "notes.jsonl").write_text('{"text": "stray"}\n')
    with pytest.raises(MixbenchError, match="fits none"):
        load_documents(DataConfig(source=str(tmp_path)))


def test_local_folder_of_subfolders(tmp_path):
    for split, n in (("train", 5), ("test", 2), ("dev", 2)):
        (tmp_path / split).mkdir()
        for k in range(n):
            (tmp_path / split / f"part{k}.txt").write_text(f"{split} text {k}\n")
    docs = load_documents(DataConfig(source=str(tmp_path)))
    assert [len(docs[s]) for s in SPLITS] == [5, 2, 2, 0, 0]


def test_missing_path_and_offline_hub(tmp_path):
    with pytest.raises(MixbenchError, match="does not exist"):
        load_documents(DataConfig(source=str(tmp_path / "nope.jsonl")))
    with pytest.raises(MixbenchError, match="could not be loaded.*offline use needs a local path"):
        load_documents(DataConfig(source="hub:nobody/no-such-dataset"))
    with pytest.raises(MixbenchError, match="no local path nobody/no-such-dataset exists"):
        load_documents(DataConfig(source="nobody/no-such-dataset"))
