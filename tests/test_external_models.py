"""Scoring transformers models mixbench did not train (`mixbench eval --hf-model`): a tiny random LLaMA and Mamba
saved to disk with their own tokenizers, scored on bits per byte beside a mixbench row (equal to a naive
per-document loop over the same documents), labelled external, never ranked; hostile models (peeking at later
tokens, mixing rows of a batch) are refused by the model-level checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.cli import main
from harness.config import DataConfig
from harness.corpus.data import load_corpus, load_documents
from harness.errors import MixbenchError
from harness.hf.external import ExternalDescriptor, ExternalLM, load_external, model_checks
from harness.reporting.board import build_board
from harness.reporting.table import build_table
from harness.store.results import ResultsStore

from external_models import save_tiny_llama, save_tiny_mamba


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    texts = [d.text for d in load_documents(DataConfig())["train"][:40]]
    root = tmp_path_factory.mktemp("hf-models")
    return {"llama": save_tiny_llama(root / "tiny-llama", texts), "mamba": save_tiny_mamba(root / "tiny-mamba", texts)}


def naive_bits_per_byte(folder: Path, split: str = "test") -> float:
    """Every document of ``split`` scored by the transformers model itself, window by window, with a plain loop:
    the reference the perplexity suite's bpb must equal."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(folder)
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    context = model.config.max_position_embeddings
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    nll = n_bytes = 0.0
    for doc in load_documents(DataConfig())[split]:
        ids = [bos, *tok(doc.text, add_special_tokens=False)["input_ids"], tok.eos_token_id]
        for start in range(0, len(ids) - 1, context):
            window = torch.tensor([ids[start:start + context + 1]])
            with torch.no_grad():
                logits = model(input_ids=window[:, :-1]).logits[0].double()
            nll += float(F.cross_entropy(logits, window[0, 1:], reduction="sum"))
        n_bytes += len(doc.text.encode("utf-8"))
    return nll / math.log(2) / n_bytes


def test_bits_per_byte_of_external_models_beside_a_mixbench_row(tiny_models, attention_checkpoint, tmp_path):
    store = tmp_path / "results"
    common = ["--results", str(store), "--no-progress", "--suite-config", "splits=test"]
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), *common]) == 0
    for name, folder in tiny_models.items():  # transformers' Mamba runs its slow reference scan here: 8 windows
        subset = ["max_windows=8"] if name == "mamba" else []
        assert main(["eval", "--suite", "perplexity", "--hf-model", str(folder), *common, *subset]) == 0
    table = build_table(ResultsStore(store), all_configs=True)
    board = build_board(table)
    rows = {r.mixer: r for r in table.rows}
    assert set(rows) == {"attention", "tiny-llama", "tiny-mamba"}
    for name, folder in tiny_models.items():
        row = rows[folder.name]
        assert row.external and row.label.startswith(f"{folder.name} @") and row.label.endswith("(external)")
        assert board.rank[row.key] is None and row.gate == "model-checks"
        run = row.runs[0]
        assert run.manifest.subject.parameters == sum(
            p.numel() for p in load_external(str(folder)).parameters())
        assert run.manifest.subject.mixer_config["revision"].startswith("sha256:")
        bpb = run.metric("bpb")
        assert bpb.unreliable is None and run.metric("ppl").unreliable  # tokens of another tokenizer
        if name == "llama":  # (transformers' Mamba runs its slow reference scan on a CPU: checked on LLaMA alone)
            assert bpb.value == pytest.approx(naive_bits_per_byte(folder), rel=1e-6)
        # a random model spreads its probability over the vocabulary: log2(V) bits per token of its own tokenizer
        tokens = run.metric("ppl").n
        vocab = load_external(str(folder)).config.vocab_size
        assert bpb.value == pytest.approx(math.log2(vocab) * tokens / bpb.n, rel=0.15)
    # external rows are never ranked; and runs under an ad-hoc config (splits=test) make a diagnostic column, which
    # ranks nothing: a board of one mixer, no control and only ad-hoc runs tells nothing apart
    assert board.rank[rows["attention"].key] is None and not board.voting
    # paired on the same documents across tokenizers
    from harness.reporting.run_report import compare_models

    _, _, comparisons = compare_models(ResultsStore(store), rows["tiny-llama"].key, rows["attention"].key)
    by_metric = {c.column.rsplit("/", 1)[1]: c for c in comparisons}  # columns: perplexity[splits=test]/<metric>
    assert by_metric["bpb"].basis == "11 shared items" and by_metric["bpb"].verdict == "B better"
    assert by_metric["ppl"].verdict.startswith("unreliable")


def test_decoding_through_the_models_own_cache_equals_transformers_generate(tiny_models):
    for folder in tiny_models.values():
        model = load_external(str(folder))
        prompt = torch.tensor([[model.tokenizer.bos_id, *model.tokenizer.encode("Call me Ishmael. Some years")]])
        ours = model.generate(prompt, 10, temperature=0)
        with model.own_code():
            theirs = model.hf.generate(prompt, max_new_tokens=10, do_sample=False, eos_token_id=None,
                                       pad_token_id=model.tokenizer.pad_id)
        assert torch.equal(ours, theirs)
        full, _ = model(ours)
        prefilled = model(prompt, model.init_states(1))[1]
        after = slice(prompt.shape[1], prompt.shape[1] + 3)  # the three tokens after the prompt
        first = model(ours[:, after], model.fork_states(prefilled))[0]
        again = model(ours[:, after], model.fork_states(prefilled))[0]  # a state reused is the state it was
        torch.testing.assert_close(first, again, rtol=0, atol=1e-5)
        torch.testing.assert_close(first, full[:, after], rtol=0, atol=1e-4)
        if model.descriptor.model_class == "LlamaForCausalLM":  # a key-value cache is cut back when reused
            torch.testing.assert_close(model(ours[:, after], prefilled)[0], first, rtol=0, atol=1e-5)
        else:  # a recurrent cache cannot be: reusing a used state is refused, not silently wrong
            torch.testing.assert_close(model(ours[:, after], prefilled)[0], first, rtol=0, atol=1e-5)
            with pytest.raises(MixbenchError, match="fork_states"):
                model(ours[:, after], prefilled)
        states = model.init_states(1)
        logits, states = model(prompt, states)
        for t in range(prompt.shape[1], ours.shape[1]):  # each step's logits equal the full forward's
            torch.testing.assert_close(logits[:, -1], full[:, t - 1], rtol=0, atol=1e-4)
            logits, states = model(ours[:, t:t + 1], states)


_AFTER_MIXBENCHS_KERNELS = """
import sys
import torch
import fla.models  # re-registers 'mamba' with the Auto classes
from mixers.mamba.routing import install
install()  # mamba-ssm importable without its CUDA extension
from transformers import AutoConfig
from harness.hf.external import load_external
assert not AutoConfig.for_model("mamba").__class__.__module__.startswith("transformers.")
model = load_external(sys.argv[1])
assert type(model.hf).__module__ == "transformers.models.mamba.modeling_mamba", type(model.hf)
assert model.descriptor.model_class == "MambaForCausalLM"
import transformers.models.mamba.modeling_mamba as m
assert m.mamba_selective_scan.__wrapped__ is not None  # bound to mamba-ssm's CUDA-only scan in this process
prompt = torch.tensor([[1, 2, 3, 4]])
assert torch.isfinite(model(prompt)[0]).all()
ours = model.generate(prompt, 4, temperature=0)
with model.own_code():
    theirs = model.hf.generate(prompt, max_new_tokens=4, do_sample=False, eos_token_id=None, pad_token_id=0)
assert torch.equal(ours, theirs)
print("ok")
"""


def test_a_mamba_folder_runs_on_a_cpu_after_mixbench_imported_fla_and_mamba_ssm(tiny_models):
    """In one process with mixbench's mixers: fla re-registers ``mamba`` with the Auto classes (its kernels need
    Triton), and mixbench's Mamba routing makes mamba-ssm importable without CUDA, so transformers binds Mamba's scan
    to mamba-ssm's CUDA kernel. The folder still loads with transformers' class and runs its reference code here.
    (A fresh process: which module is imported first decides the binding.)"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _AFTER_MIXBENCHS_KERNELS, str(tiny_models["mamba"])],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_byte_lengths_count_the_text_for_both_tokenizers(tiny_models):
    docs = load_documents(DataConfig())["test"][:4]
    for name, folder in tiny_models.items():
        tok = load_external(str(folder)).tokenizer
        lengths = tok.token_byte_lengths()
        for doc in docs:
            counted = int(lengths[tok.encode(doc.text)].sum())
            prefix_space = 1 if name == "llama" and not doc.text.startswith(" ") else 0  # SentencePiece's ▁
            assert counted == len(doc.text.encode("utf-8")) + prefix_space


class _Output:
    def __init__(self, logits):
        self.logits = logits


class _Hostile(nn.Module):
    """A causal LM that cheats: ``peek`` lets every position see the last token; ``batch`` mixes the rows."""

    def __init__(self, vocab: int, how: str):
        super().__init__()
        self.config = type("C", (), {"vocab_size": vocab, "max_position_embeddings": 64})()
        self.embed = nn.Embedding(vocab, vocab)
        self.how = how

    def get_input_embeddings(self):
        return self.embed

    def forward(self, input_ids, use_cache=False, **_):
        x = self.embed(input_ids)
        if self.how == "peek":
            x = x + self.embed(input_ids[:, -1:])
        else:
            x = x + x.mean(0, keepdim=True)
        return _Output(x)


@pytest.mark.parametrize("how, failure", [("peek", "not causal"), ("batch", "batch dependent")])
def test_model_checks_refuse_hostile_models(tiny_models, how, failure):
    tokenizer = load_external(str(tiny_models["mamba"])).tokenizer
    descriptor = ExternalDescriptor("hostile", "-", "x", "Hostile", 1, "float32", "-")
    model = ExternalLM(_Hostile(tokenizer.vocab_size, how), tokenizer, descriptor, 64)
    failures = model_checks(model)
    assert len(failures) == 1 and failures[0].startswith(failure)
    assert model_checks(load_external(str(tiny_models["llama"]))) == []


def test_external_robustness_and_lm_eval_and_refusals(tiny_models, tmp_path, capsys):
    store = ["--results", str(tmp_path / "results"), "--no-progress"]
    mamba = str(tiny_models["mamba"])
    assert main(["eval", "--suite", "robustness", "--hf-model", mamba, *store,
                 "--suite-config", "pairs_per_slice=10", "bootstrap=100"]) == 0
    assert main(["eval", "--suite", "lm-eval", "--hf-model", mamba, *store, "--suite-config", "limit=16"]) == 0
    assert main(["eval", "--suite", "throughput", "--hf-model", str(tiny_models["llama"]), *store, "--suite-config",
                 "lengths=32,64", "repeats=3", "warmup=3", "max_warmup=3", "decode_tokens=4"]) == 0
    runs = list(ResultsStore(tmp_path / "results").iter_runs(samples=False))
    assert {r.manifest.suite for r in runs} == {"robustness", "lm-eval", "throughput"}
    speed = next(r for r in runs if r.manifest.suite == "throughput")
    assert {"prefill_tok_s", "train_tok_s", "decode_ms"} <= {m.name for m in speed.metrics}
    assert not {"state_floats_max", "kernel_peak_fraction", "train_vs_floor"} & {m.name for m in speed.metrics}
    assert all(r.manifest.subject.kind == "external" and r.manifest.gate.status == "model-checks" for r in runs)
    capsys.readouterr()
    for argv, message in [
        (["--suite", "glue", "--hf-model", mamba], "scores mixbench models only"),
        (["--suite", "perplexity", "--hf-model", str(tmp_path / "nowhere")], "no such folder"),
        (["--suite", "perplexity", "--checkpoint", mamba, "--revision", "main"], "go with --hf-model"),
    ]:
        assert main(["eval", *argv, *store]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err


def test_external_corpus_starts_documents_with_the_models_bos(tiny_models):
    model = load_external(str(tiny_models["llama"]))
    corpus = load_corpus(DataConfig(), progress=False, tokenizer=model.tokenizer)
    doc = corpus.encode_split("test")[0]
    assert doc.ids[0] == model.tokenizer.bos_id != model.tokenizer.eos_id and doc.ids[-1] == model.tokenizer.eos_id


def test_an_exported_checkpoint_scored_as_an_external_model_gets_the_same_numbers(attention_checkpoint, tmp_path,
                                                                                   capsys):
    """export -> eval --hf-model: the same weights, tokenizer and documents through transformers give the checkpoint
    row's perplexity and bits per byte (the external path measures what the native one does)."""
    from harness.hf.export import export_checkpoint

    export_checkpoint(attention_checkpoint, tmp_path / "hf")
    store = tmp_path / "results"
    common = ["--results", str(store), "--no-progress", "--suite-config", "splits=test", "max_windows=64"]
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), *common]) == 0
    assert main(["eval", "--suite", "perplexity", "--hf-model", str(tmp_path / "hf"), *common]) == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    assert main(["eval", "--suite", "perplexity", "--hf-model", str(tmp_path / "hf"), "--trust-remote-code",
                 *common]) == 0
    runs = {r.manifest.subject.kind: r for r in ResultsStore(store).iter_runs(samples=False)}
    for metric in ("ppl", "bpb"):
        native, external = runs["model"].metric(metric), runs["external"].metric(metric)
        assert external.value == pytest.approx(native.value, rel=1e-6)
        assert external.items.ids == native.items.ids


def test_an_external_model_is_rated_by_the_judge_beside_mixbench_models(tiny_models, attention_checkpoint, tmp_path,
                                                                     monkeypatch):
    from fake_judge import FakeJudge

    results = tmp_path / "results"
    with FakeJudge(lambda p, a, b: "A" if len(a) >= len(b) else "B") as judge:
        monkeypatch.setenv("MIXBENCH_JUDGE_URL", judge.url)
        monkeypatch.setenv("MIXBENCH_JUDGE_MODEL", "fake-judge")
        opts = ["--results", str(results), "--no-progress", "--suite-config", "n_prompts=3", "max_new_tokens=8"]
        assert main(["eval", "--suite", "judge", "--checkpoint", str(attention_checkpoint), *opts]) == 0
        assert main(["eval", "--suite", "judge", "--hf-model", str(tiny_models["mamba"]), *opts]) == 0
        assert judge.chat_requests > 0
    store = ResultsStore(results)
    gens = [r for r in store.iter_runs(samples=True) if r.manifest.kind == "suite"]
    assert gens[0].samples[0]["prompt"] == gens[1].samples[0]["prompt"]  # the same prompts, each model's tokenizer
    rated = {r.manifest.subject.kind for r in store.iter_runs(samples=False) if r.manifest.kind == "aggregate"}
    assert rated == {"model", "external"}


def test_an_edited_folder_is_another_model_and_an_unchanged_one_is_not_scored_again(tmp_path):
    """A stale number must not stand for new weights: the revision hashes the weight and config files, so a folder
    re-saved with other weights gets a new run (and a new row), while rerunning an unchanged folder writes nothing."""
    texts = [d.text for d in load_documents(DataConfig())["train"][:40]]
    folder = save_tiny_llama(tmp_path / "my-llama", texts, seed=0)
    store = tmp_path / "results"
    args = ["eval", "--suite", "perplexity", "--hf-model", str(folder), "--results", str(store), "--no-progress",
            "--suite-config", "splits=test", "max_windows=4", "bootstrap=50"]

    def runs():
        return sorted(r.run_id for r in ResultsStore(store).iter_runs(samples=False))

    assert main(args) == 0
    first = runs()
    assert main(args) == 0 and runs() == first  # unchanged: skipped
    save_tiny_llama(folder, texts, seed=1)  # same name, other weights
    assert main(args) == 0
    after = runs()
    assert len(after) == 2 and set(first) < set(after)
    revisions = {r.manifest.subject.mixer_config["revision"] for r in ResultsStore(store).iter_runs(samples=False)}
    values = {r.metric("bpb").value for r in ResultsStore(store).iter_runs(samples=False)}
    assert len(revisions) == 2 and len(values) == 2
    rows = build_table(ResultsStore(store), all_configs=True).rows
    assert len(rows) == 2 and len({r.label for r in rows}) == 2  # two rows, told apart by their revisions


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _edit_config(**changes):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return edit


def _truncate(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _empty(folder: Path) -> None:
    for file in folder.iterdir():
        file.unlink()


@pytest.mark.parametrize("edit, extra, message", [
    (_truncate, [], "/model.safetensors is truncated or not a safetensors file (SafetensorError: "),
    (_edit_config(vocab_size=10**9), [], "/config.json gives vocab_size 1000000000 but the weights' embedding has "
                                         "{vocab} rows."),
    (_edit_config(hidden_size=-4), [], "/config.json: hidden_size -4 is not a positive size."),
    (_edit_config(intermediate_size=10**12), [], "/config.json gives intermediate_size 1000000000000, more than the "),
    (_empty, [], " holds no model: no config.json"),
    (lambda folder: (folder / "model.safetensors").unlink(), [], " holds no weights: no *.safetensors or *.bin"),
    (lambda folder: (folder / "config.json").write_text("{nope"), [], "/config.json is not readable JSON"),
    (lambda folder: (folder / "tokenizer.json").unlink(), [], " holds no tokenizer (no tokenizer.json"),
    # what passes the folder checks and still fails in transformers (its own validation error, not a ValueError)
    (_edit_config(num_attention_heads=3), [], "could not be loaded as a transformers causal LM "
                                              "(StrictDataclassClassValidationError: "),
    (lambda folder: None, ["--revision", "main"], "is a local folder, scored as its files are now: drop --revision"),
], ids=["truncated", "vocabulary-1e9", "negative", "width-1e12", "empty", "no-weights", "not-json", "no-tokenizer",
        "transformers", "revision"])
def test_a_broken_folder_is_refused_in_one_sentence_and_left_as_it_is(tiny_models, tmp_path, capsys, edit, extra,
                                                                      message):
    """Each of these ended in a traceback from transformers' loader (a vocabulary of 1e9 in an allocation of that
    size) or, for --revision, was ignored: exit 2 and one sentence naming what is wrong, and nothing written."""
    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(tiny_models["llama"], folder)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    edit(folder)
    before = _contents(folder)
    capsys.readouterr()
    assert main(["eval", "--suite", "perplexity", "--hf-model", str(folder), *extra,
                 "--results", str(tmp_path / "results"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mixbench: error: ") and len(err.splitlines()) == 1, err
    assert message.format(vocab=vocab) in err and "Traceback" not in err
    assert _contents(folder) == before and not (tmp_path / "results").exists()


def test_an_export_whose_weights_were_edited_is_refused(attention_checkpoint, tmp_path, capsys):
    """An exported folder records the checkpoint's weights_sha256: weights changed after export are not the model
    it names, refused as a checkpoint whose weights changed."""
    from safetensors.torch import load_file, save_file

    from harness.hf.export import export_checkpoint

    folder = export_checkpoint(attention_checkpoint, tmp_path / "hf").folder
    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] += 1e-3
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    before = _contents(folder)
    capsys.readouterr()
    assert main(["eval", "--suite", "perplexity", "--hf-model", str(folder), "--trust-remote-code",
                 "--results", str(tmp_path / "results"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # after transformers' "Loading weights" progress bar
    assert err[-1].startswith("mixbench: error: exported model ") and "Traceback" not in "\n".join(err)
    assert "the weights do not match the hash in config.json (mixbench_export.weights_sha256)" in err[-1]
    assert _contents(folder) == before


def test_a_reimported_export_is_read_with_mixbenchs_own_tokenizer(attention_checkpoint, tiny_models, tmp_path):
    """An unedited export's tokenizer.json is the tokenizer mixbench trained it with: the model carries that
    tokenizer's fingerprint, and its corpus is the checkpoint's (same documents, same tokens), so its per-token
    metrics are in a mixbench row's unit; an edited tokenizer.json, or another model's, is its own tokenizer."""
    from harness.corpus.tokenizer import Tokenizer
    from harness.hf.export import export_checkpoint
    from harness.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(attention_checkpoint)
    folder = export_checkpoint(attention_checkpoint, tmp_path / "hf").folder
    model = load_external(str(folder), trust_remote_code=True)
    assert model.mixbench_tokenizer
    assert model.descriptor.tokenizer == Tokenizer.from_file(ckpt.tokenizer_path).fingerprint
    corpus = load_corpus(ckpt.spec.data, progress=False, tokenizer=model.tokenizer)
    assert corpus.fingerprint == ckpt.meta["corpus_fingerprint"]  # what the checkpoint's rows record as their data
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two ids swapped: another tokenizer
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    edited = load_external(str(folder), trust_remote_code=True)
    assert not edited.mixbench_tokenizer and edited.descriptor.tokenizer != model.descriptor.tokenizer
    assert not load_external(str(tiny_models["llama"])).mixbench_tokenizer


def test_a_reimported_export_is_compared_per_token_like_a_mixbench_row(attention_checkpoint, tmp_path):
    from harness.hf.export import export_checkpoint

    folder = export_checkpoint(attention_checkpoint, tmp_path / "hf").folder
    store = tmp_path / "results"
    assert main(["eval", "--suite", "perplexity", "--hf-model", str(folder), "--trust-remote-code", "--results",
                 str(store), "--no-progress", "--suite-config", "splits=test", "max_windows=4", "bootstrap=50"]) == 0
    run = next(ResultsStore(store).iter_runs(samples=False))
    assert run.metric("ppl").unreliable is None and run.metric("bpb").unreliable is None
