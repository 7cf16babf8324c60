"""The lm-eval adapter against direct batch-1 computations, lm-eval end to end, the perplexity suite, and the
results-store keying by weight hash."""

from __future__ import annotations

import gzip
import json
import math
from importlib.resources import files
from pathlib import Path

import lm_eval
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from harness.model.checkpoint import load_checkpoint, load_model, save_checkpoint
from harness.cli import main
from harness.config import DataConfig
from harness.corpus.data import SPLITS, Corpus, Document
from suites.lm_eval.model import MixbenchLM
from harness.store.results import ResultsStore
from harness.suite import SuiteContext
from suites.perplexity import Perplexity, PerplexityConfig


@pytest.fixture(scope="module")
def lm(protot_checkpoint) -> MixbenchLM:
    return MixbenchLM(pretrained=str(protot_checkpoint), device="cpu", batch_size=3)


def moby_chapters(k: int) -> list[str]:
    with files("harness.corpus").joinpath("corpora/moby_dick.jsonl.gz").open("rb") as raw, gzip.open(raw, "rt") as f:
        texts = [json.loads(line)["text"].strip() for line in f]
    return [t for t in texts if len(t) > 4000][:k]


def request(kind: str, *args) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=tuple(args), idx=0)


@torch.no_grad()
def reference_loglikelihood(lm: MixbenchLM, context: str, continuation: str) -> tuple[float, bool]:
    """One request alone (no batching, no padding): the same left-truncation rule as lm-eval's HF model."""
    ctx = lm.tok.encode(context)
    cont = lm.tok.encode(context + continuation)[len(ctx) :]
    whole = torch.tensor((ctx + cont)[-(lm.max_length + 1) :])
    logp = F.log_softmax(lm.model(whole[None, :-1])[0][0].double(), -1)[-len(cont) :]
    target = torch.tensor(cont)
    return float(logp.gather(1, target[:, None]).sum()), bool((logp.argmax(-1) == target).all())


def test_loglikelihood_matches_unbatched_scoring(lm):
    long_context = " ".join(moby_chapters(1)[0].split()[:400])  # far past the 128-token context: left-truncated
    pairs = [("Call me", " Ishmael."), ("The whale", " swam"), (long_context, " and the sea."), ("A", " b c d e f"),
             ("It was the best of times,", " it was the worst of times.")]  # fmt: skip
    got = lm.loglikelihood([request("loglikelihood", c, x) for c, x in pairs], disable_tqdm=True)
    for (c, x), (logprob, greedy) in zip(pairs, got, strict=True):
        ref_logprob, ref_greedy = reference_loglikelihood(lm, c, x)
        assert logprob == pytest.approx(ref_logprob, abs=1e-3) and greedy == ref_greedy
    assert len(lm.tok.encode(long_context)) > lm.max_length


def test_rolling_windows_score_every_token_once(lm):
    """A 3.4-window text, scored token by token the way lm-eval documents ``loglikelihood_rolling``: full
    windows of L targets, the first opened by the prefix token and later ones by the token before their first
    target; the remaining tail targets are scored in one last window holding the full L tokens of context."""
    L = lm.max_length
    words = moby_chapters(1)[0].split()
    text = next(t for t in (" ".join(words[:k]) for k in range(10, 1000, 5)) if len(lm.tok.encode(t)) > 3.4 * L)
    full = [lm.eot_token_id, *lm.tok.encode(text)]  # full[j + 1] is token j
    n = len(full) - 1
    assert 3 * L < n < 4 * L
    total = 0.0
    with torch.no_grad():
        for start, scored in [(k * L, L) for k in range(n // L)] + [(n - L, n % L)]:
            window = torch.tensor(full[start : start + L + 1])
            logp = F.log_softmax(lm.model(window[None, :-1])[0][0].double(), -1)
            total += float(logp.gather(1, window[1:, None])[-scored:].sum())
    (got,) = lm.loglikelihood_rolling([request("loglikelihood_rolling", text)], disable_tqdm=True)
    assert isinstance(got, float) and got == pytest.approx(total, rel=1e-5)


@torch.no_grad()
def reference_greedy(lm: MixbenchLM, context: str, max_new: int, until: list[str]) -> str:
    """Greedy decoding by re-running the full forward on the growing sequence (no step(), no batching)."""
    ids = lm.tok.encode(context)[-(lm.max_length - max_new) :]
    for _ in range(max_new):
        ids.append(int(lm.model(torch.tensor([ids]))[0][0, -1].argmax()))
    text = lm.tok.decode(ids[-max_new:])
    cuts = [i for i in (text.find(s) for s in until) if i >= 0]
    return text[: min(cuts)] if cuts else text


def test_generate_until_is_greedy_step_decoding_cut_at_stop_strings(lm):
    eos = lm.tok.decode([lm.eot_token_id])
    by_length: dict[int, list[str]] = {}
    for p in ["The whale", "The ship", "The sea", "A whale", "The boat", "Ahab", "The sky", "Our ship"]:
        by_length.setdefault(len(lm.tok.encode(p)), []).append(p)
    same = max(by_length.values(), key=len)[:2]  # equal-length prompts share one generate() batch
    assert len(same) == 2
    prompts = [("Call me Ishmael. Some years ago", {"until": ["\n"], "max_gen_toks": 12}),
               (same[0], {"until": [" the"], "max_gen_toks": 12}),
               (same[1], {"until": [" the"], "max_gen_toks": 12}),
               (" ".join(["word"] * 300), {"until": ["."], "max_gen_toks": 1000})]  # fmt: skip
    got = lm.generate_until([request("generate_until", p, dict(k)) for p, k in prompts], disable_tqdm=True)
    for (prompt, kwargs), text in zip(prompts, got, strict=True):
        max_new = min(kwargs["max_gen_toks"], lm.max_length - 1)  # 1000 does not fit: capped, prompt left-truncated
        assert text == reference_greedy(lm, prompt, max_new, [*kwargs["until"], eos])
        assert len(lm.tok.encode(text)) <= max_new + 1


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def task_configs(tmp: Path, documents: list[str]) -> list[dict]:
    """Dict task configs (absolute data paths: lm-eval resolves relative ones against the CWD)."""
    mc = write_jsonl(tmp / "mc.jsonl", [{"sentence": s, "label": i % 2} for i, s in
                                         enumerate(["What a lovely day.", "This is awful.", "Great work!", "Bad."])])  # fmt: skip
    text = write_jsonl(tmp / "text.jsonl", [{"text": d} for d in documents])
    gen = write_jsonl(tmp / "gen.jsonl", [{"q": "Call me", "a": "Ishmael"}, {"q": "The whale", "a": "swam"}])

    def task(name, path, **kw):
        return dict(task=name, dataset_path="json", dataset_kwargs={"data_files": {"test": str(path)}},
                    test_split="test", metadata={"version": 1.0}, **kw)  # fmt: skip

    return [
        task("t_mc", mc, output_type="multiple_choice", doc_to_text="{{sentence}}\nSentiment:", doc_to_target="label",
             doc_to_choice=["negative", "positive"], metric_list=[{"metric": "acc"}]),
        task("t_ppl", text, output_type="loglikelihood_rolling", doc_to_text="", doc_to_target="text",
             metric_list=[{"metric": "word_perplexity"}, {"metric": "bits_per_byte"}]),
        task("t_gen", gen, output_type="generate_until", doc_to_text="{{q}}", doc_to_target="{{a}}",
             generation_kwargs={"until": ["\n"], "max_gen_toks": 6}, metric_list=[{"metric": "exact_match"}]),
    ]  # fmt: skip


def test_simple_evaluate_runs_the_three_output_types(protot_checkpoint, lm, tmp_path):
    documents = [d[:1500] for d in moby_chapters(3)]
    results = lm_eval.simple_evaluate(
        model="mixbench", model_args=f"pretrained={protot_checkpoint}", batch_size=4, tasks=task_configs(tmp_path, documents),
        task_manager=TaskManager(include_defaults=False), bootstrap_iters=0, log_samples=True,
    )
    res = results["results"]
    assert set(res) == {"t_mc", "t_ppl", "t_gen"}
    # multiple choice: the accuracy lm-eval reports is argmax over our loglikelihoods of the two choices
    preds = [np.argmax([s[0] for s in sample["filtered_resps"]]) for sample in results["samples"]["t_mc"]]
    assert res["t_mc"]["acc,none"] == pytest.approx(np.mean([p == i % 2 for i, p in enumerate(preds)]))
    # perplexity: bits per byte is minus the summed log-likelihood of the documents over their UTF-8 bytes
    logliks = lm.loglikelihood_rolling([request("loglikelihood_rolling", d) for d in documents], disable_tqdm=True)
    n_bytes = sum(len(d.encode("utf-8")) for d in documents)
    assert res["t_ppl"]["bits_per_byte,none"] == pytest.approx(-sum(logliks) / n_bytes / math.log(2), rel=1e-5)
    generations = [s["filtered_resps"][0] for s in results["samples"]["t_gen"]]
    assert generations == [reference_greedy(lm, q, 6, ["\n", lm.tok.decode([lm.eot_token_id])]) for q in ("Call me", "The whale")]


def cut_to_tokens(tokenizer, text: str, n_tokens: int) -> str:
    """The shortest prefix of ``text`` (ending on a non-space character) that encodes to exactly ``n_tokens``."""
    for end in range(1, len(text) + 1):
        if not text[end - 1].isspace() and len(tokenizer.encode(text[:end])) == n_tokens:
            return text[:end]
    raise AssertionError(f"no prefix of {n_tokens} tokens")


def test_rolling_perplexity_equals_the_perplexity_suite(protot_checkpoint, lm, tmp_path):
    """Both sides score the same targets with the same contexts.

    The perplexity suite scores ``[eos] + t + [eos]`` in windows of L + 1 tokens that share one token: window k
    feeds t[kL-1 : (k+1)L-1] (the end-of-text in place of t[-1]) and predicts t[kL : (k+1)L]. lm-eval's rolling
    windows (context_len=1) are the same for every full window, but a last, partial window gets the full L
    tokens of context instead. So the documents are cut to exactly 1, 2 and 4 windows of tokens, plus one
    shorter than a window (a single window, the same on both sides): then every token of every text has the
    same context on both sides. What remains is that the suite also predicts each document's closing
    end-of-text, which moves perplexity by about 1% here (how much depends on the trained model); the test then
    adds those targets' NLL (one forward pass of the suite's last window per document) to lm-eval's total and
    demands agreement to 1e-4."""
    model, _ = load_model(protot_checkpoint)
    tokenizer, L = lm.tok, model.config.context
    chapters = moby_chapters(4)
    documents = [cut_to_tokens(tokenizer, c, k * L) for c, k in zip(chapters, (1, 2, 4))] + [chapters[3][:200]]
    assert len(tokenizer.encode(documents[-1])) < L
    splits = {s: [] for s in SPLITS}
    splits["train"] = [Document("train/0", "unused", "test")]
    splits["test"] = [Document(f"doc/{i}", d, "test") for i, d in enumerate(documents)]
    corpus = Corpus(DataConfig(), splits, tokenizer, np.arange(64, dtype=np.int32), "consistency", progress=False)
    suite = Perplexity(PerplexityConfig(splits=("test",), batch_size=4, bootstrap=0))
    metrics = {m.name: m for m in suite.run(model, SuiteContext(corpus, tmp_path, progress=False)).metrics}

    results = lm_eval.simple_evaluate(
        model=lm, tasks=[task_configs(tmp_path, documents)[1]], task_manager=TaskManager(include_defaults=False),
        bootstrap_iters=0, log_samples=True,
    )
    logliks = [s["filtered_resps"][0] for s in results["samples"]["t_ppl"]]
    n_tokens = sum(len(tokenizer.encode(d)) for d in documents)
    assert metrics["ppl"].n == n_tokens + len(documents)  # + each closing end-of-text
    assert math.exp(-sum(logliks) / n_tokens) == pytest.approx(metrics["ppl"].value, rel=0.03)

    eos_nll = 0.0
    with torch.no_grad():
        for doc in corpus.encode_split("test"):
            ids = torch.from_numpy(doc.ids.astype(np.int64))
            window = ids[((len(ids) - 2) // L) * L :]  # the suite's window holding the final target
            eos_nll -= float(F.log_softmax(model(window[None, :-1])[0][0, -1].double(), -1)[ids[-1]])
    suite_nll = math.log(metrics["ppl"].value) * metrics["ppl"].n
    assert -sum(logliks) + eos_nll == pytest.approx(suite_nll, rel=1e-4)


def perturbed_copy(checkpoint: Path, out: Path) -> Path:
    """The same run spec with one weight changed: what a retrained model at another path looks like."""
    model, ckpt = load_model(checkpoint)
    with torch.no_grad():
        model.norm.weight.add_(0.01)
    meta = {k: v for k, v in ckpt.meta.items() if k not in ("format", "version", "run_spec", "train_id", "step", "weights_sha256")}
    save_checkpoint(out, ckpt.spec, model, ckpt.step, meta, ckpt.tokenizer_path, None)
    return out


def test_cli_runs_are_keyed_by_weight_hash_and_task_content(protot_checkpoint, tmp_path, capsys):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = write_jsonl(tasks / "mc.jsonl", [{"sentence": "Good.", "label": 1}, {"sentence": "Bad.", "label": 0}])
    (tasks / "mc.yaml").write_text(
        f"task: tiny_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: \"{{sentence}}\\nAnswer:\"\n"
        "doc_to_target: label\ndoc_to_choice: [\"no\", \"yes\"]\nmetric_list:\n  - metric: acc\nmetadata:\n  version: 1.0\n"
    )
    results = tmp_path / "results"
    store = ResultsStore(results)

    def lm_eval_cli(ckpt: Path) -> set[str]:
        args = ["lm-eval", "--checkpoint", str(ckpt), "--tasks", "tiny_mc", "--include-path", str(tasks), "--results", str(results)]
        assert main(args) == 0
        return {r.run_id for r in store.iter_runs()}

    first = lm_eval_cli(protot_checkpoint)
    assert len(first) == 1
    assert lm_eval_cli(protot_checkpoint) == first and "nothing to do" in capsys.readouterr().out
    (run,) = store.iter_runs()
    assert run.manifest.subject.weights_sha256 == load_checkpoint(protot_checkpoint).meta["weights_sha256"]
    assert run.manifest.suite == "lm-eval" and [m.name for m in run.metrics] == ["tiny_mc/acc"]
    (acc,) = run.metrics
    assert acc.items is not None and len(acc.items) == 2 and acc.value == sum(acc.items.values) / 2

    retrained = lm_eval_cli(perturbed_copy(protot_checkpoint, tmp_path / "retrained"))
    assert len(retrained) == 2  # same spec, new weights: a new run, not the stale answers
    write_jsonl(data, [{"sentence": "Good!", "label": 1}, {"sentence": "Bad.", "label": 0}])
    assert len(lm_eval_cli(protot_checkpoint)) == 3  # edited task data: a new run too
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(results), "--format", "json", "--all"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]  # zero-shot scores sit in their own lm-eval columns
    (column,) = [c for c in row["cells"] if c.startswith("lm-eval[") and c.endswith("/tiny_mc/acc")]
    assert row["mixer"] == "protot" and "tasks=tiny_mc" in column  # an ad-hoc task list: labelled with it


def test_a_plan_with_lm_eval_among_its_suites_stores_and_boards_it(tmp_path, capsys):
    """lm-eval is a registered suite: a plan runs it like any other (its bundled offline stand-in task), keyed by
    the one identity, and the board gets its column."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("preset: tiny\nmixers: [protot]\ncontrols: []\nsuites:\n  lm-eval: {limit: 40}\n  perplexity: {max_windows: 8}\n"
                    "train: {token_budget: 4096}\ndata: {max_train_docs: 20}\n")
    results = tmp_path / "results"
    assert main(["run", str(plan), "--results", str(results), "--no-progress"]) == 0
    assert "1 model(s) trained, 2 run(s) written" in capsys.readouterr().out
    assert main(["run", str(plan), "--results", str(results), "--no-progress"]) == 0
    assert "0 model(s) trained, 0 run(s) written" in capsys.readouterr().out  # predicted and skipped
    assert main(["leaderboard", "--results", str(results), "--format", "json", "--all"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    acc = row["cells"]["lm-eval/standin_sentiment_zeroshot/acc"]
    assert 0.0 <= acc["value"] <= 1.0 and acc["role"] == "score" and acc["interval"]["kind"] == "normal"
    # its chance level is the majority rate of the 40 scored gold labels, read here from the data file itself
    from importlib import resources

    path = resources.files("suites.glue") / "standin_data" / "sentiment" / "validation.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        labels = [json.loads(line)["label"] for _, line in zip(range(40), f)]
    assert acc["chance"] == pytest.approx(max(labels.count(0), labels.count(1)) / 40)


def test_chance_of_a_multiple_choice_accuracy_is_the_constant_answer_rate():
    from suites.lm_eval.suite import constant_answer_rate

    def sample(target, choices=(" no", " yes", " maybe"), filt="none"):
        return {"doc_id": 0, "target": target, "arguments": [("ctx", c) for c in choices], "filter": filt}

    logged = [sample(0), sample(1), sample(1), sample(2), sample("yes"), sample(" maybe", filt="other")]
    assert constant_answer_rate(logged, "acc", "none") == pytest.approx(3 / 5)  # position 1 is gold 3 times
    assert constant_answer_rate(logged, "acc_norm", "other") is None  # one sample only
    assert constant_answer_rate(logged, "f1", "none") is None
    assert constant_answer_rate([sample([0, 1]), sample(1)], "acc", "none") is None  # several golds
    assert constant_answer_rate([sample(5), sample(1)], "acc", "none") is None  # not a choice
