"""`mixbench export`: a checkpoint as a transformers folder that AutoModelForCausalLM / AutoTokenizer load, with the
same logits (1e-5) and the same greedy decode (through each mixer's step()) as mixbench, for every built-in mixer;
lm-eval's own `hf` model scores it as mixbench's lm-eval model does; the card carries the board row."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.config import DataConfig
from harness.corpus.data import load_documents
from harness.corpus.tokenizer import train_bpe
from harness.errors import MixbenchError
from harness.hf.export import export_checkpoint, push_to_hub
from harness.model.backbone import build_model
from harness.model.checkpoint import load_model, save_checkpoint
from harness.model.specs import bind_vocab, make_run_spec
from harness.registry import MIXERS

BUILT_IN = [name for name in MIXERS.names() if MIXERS.get(name).source.startswith("mixers.")]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    texts = [d.text for d in load_documents(DataConfig())["train"][:40]]
    tok = train_bpe(texts, 512, tmp_path_factory.mktemp("bpe"))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(path)
    return path


def untrained_checkpoint(folder: Path, mixer: str, tokenizer_file: Path, seed: int = 1) -> Path:
    spec = bind_vocab(make_run_spec(mixer, "tiny"), 512)
    save_checkpoint(folder, spec, build_model(spec.model, seed=seed), 0, {"final": True}, tokenizer_file, None)
    return folder


def from_pretrained(folder: Path, **kwargs):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, **kwargs).eval()


@pytest.mark.parametrize("mixer", BUILT_IN)
def test_round_trip_logits_and_greedy_decode_equal_mixbench(mixer, tokenizer_file, tmp_path):
    ckpt = untrained_checkpoint(tmp_path / "ckpt", mixer, tokenizer_file)
    export_checkpoint(ckpt, tmp_path / "hf")
    hf = from_pretrained(tmp_path / "hf")
    ours, _ = load_model(ckpt)
    ids = torch.randint(2, 512, (2, 41), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs_logits = hf(ids).logits
        our_logits, _ = ours(ids)
    assert theirs_logits.dtype == torch.float32
    torch.testing.assert_close(theirs_logits, our_logits, rtol=0, atol=1e-5)
    prompt = ids[:1, :17]
    out = hf.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, output_logits=True,
                      return_dict_in_generate=True)
    assert torch.equal(out.sequences, ours.generate(prompt, 12, temperature=0))
    # each decoding step's logits (prefill, then the mixers' step()) equal one forward pass over the whole text
    with torch.no_grad():
        full, _ = ours(out.sequences)
    torch.testing.assert_close(torch.stack(out.logits, 1), full[:, 16:28], rtol=0, atol=1e-5)


def test_generate_steps_through_the_mixers_and_refuses_left_padding(tokenizer_file, tmp_path, monkeypatch):
    ckpt = untrained_checkpoint(tmp_path / "ckpt", "deltanet", tokenizer_file)
    export_checkpoint(ckpt, tmp_path / "hf")
    hf = from_pretrained(tmp_path / "hf")
    calls = []
    step = type(hf.model).step
    monkeypatch.setattr(type(hf.model), "step", lambda self, *a: calls.append(1) or step(self, *a))
    prompt = torch.randint(2, 512, (1, 9))
    out = hf.generate(prompt, max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert out.shape == (1, 15) and len(calls) == 5  # one prefill forward, then one step per later token
    padded = torch.randint(2, 512, (2, 9))
    mask = torch.ones_like(padded)
    mask[1, :3] = 0
    with pytest.raises(ValueError, match="left padding"):
        hf(padded, attention_mask=mask)
    mask = torch.ones_like(padded)
    mask[1, -3:] = 0  # right padding: exact, the first six positions of row 1 are untouched
    torch.testing.assert_close(hf(padded, attention_mask=mask).logits[1, :6], hf(padded[1:, :6]).logits[0])


def test_export_cli_writes_card_tokenizer_and_code_guard(attention_checkpoint, tmp_path, capsys):
    from transformers import AutoTokenizer

    from harness.corpus.tokenizer import Tokenizer

    store = tmp_path / "results"
    assert main(["eval", "--suite", "perplexity", "--checkpoint", str(attention_checkpoint), "--results", str(store),
                 "--no-progress"]) == 0  # the suite's default config: a board cell (an override would not be)
    out = tmp_path / "hf"
    assert main(["export", str(attention_checkpoint), "--out", str(out), "--results", str(store)]) == 0
    assert "1 run(s)" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_mixbench.MixbenchForCausalLM"
    assert config["mixer"] == "attention" and config["mixbench_export"]["weights_sha256"]
    source = Path(__file__).resolve().parents[1] / "harness" / "hf" / "modeling_mixbench.py"
    assert (out / "modeling_mixbench.py").read_text().endswith(source.read_text())
    card = (out / "README.md").read_text()
    from harness.store.results import ResultsStore

    run = next(ResultsStore(store).iter_runs(samples=False))
    ppl = run.metric("ppl")
    assert f"| perplexity | ppl | {ppl.value:.4g} | [{ppl.interval.low:.4g}, {ppl.interval.high:.4g}] bootstrap 95%" \
        in card
    assert "passed (v" in card and config["mixbench_export"]["model_identity"] in card
    # the protocol the board's first lines state: the backbone rule, the matched width, the recipe's status (the
    # checkpoint trains at 32k tokens with the tiny recipe's learning rate)
    protocol = card.split("## Training protocol")[1].split("##")[0]
    assert "no residual gates" in protocol and "output projection initialised by the backbone" in protocol
    assert "matched to attention's" in protocol and ": tuned (" in protocol
    text = "Call me Ishmael. Some years ago <|endoftext|> never mind how long"
    ours = Tokenizer.from_file(next(attention_checkpoint.glob("step-*")) / "tokenizer.json")
    theirs = AutoTokenizer.from_pretrained(out)
    assert theirs("Call me Ishmael. Some years ago")["input_ids"] == ours.encode("Call me Ishmael. Some years ago")
    assert theirs.decode(ours.encode(text)) == text and theirs.eos_token_id == ours.eos_id
    # an earlier export is not replaced without --force
    with pytest.raises(MixbenchError, match="holds a model folder mixbench wrote earlier; pass --force"):
        export_checkpoint(attention_checkpoint, out)
    # code that would compute other numbers from the same weights is refused, or loaded with a warning
    config["mixbench_code"]["mixer_code"] = "0" * 16
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(RuntimeError, match="mixer_code"):
        from_pretrained(out)
    with pytest.warns(UserWarning, match="loading anyway"):
        from_pretrained(out, mixbench_allow_code_change=True)


def test_lm_eval_hf_model_scores_the_export_as_mixbench_does(protot_checkpoint, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    import suites.lm_eval.model  # noqa: F401  (registers the `mixbench` lm-eval model)

    export_checkpoint(protot_checkpoint, tmp_path / "hf")
    tasks = TaskManager(include_path=[str(Path(suites.lm_eval.model.__file__).parent / "tasks")],
                        include_defaults=False)

    def loglikelihoods(model: str, args: str) -> list[float]:
        out = lm_eval.simple_evaluate(model=model, model_args=args, tasks=["standin_sentiment_zeroshot"],
                                      task_manager=tasks, batch_size=4, limit=12, log_samples=True, device="cpu")
        rows = sorted(out["samples"]["standin_sentiment_zeroshot"], key=lambda r: r["doc_id"])
        return [float(resp[0][0]) for r in rows for resp in r["resps"]]

    theirs = loglikelihoods("hf", f"pretrained={tmp_path / 'hf'},trust_remote_code=True,dtype=float32")
    ours = loglikelihoods("mixbench", f"pretrained={protot_checkpoint}")
    assert len(theirs) == len(ours) == 24
    assert max(abs(a - b) for a, b in zip(theirs, ours)) < 1e-4


def test_push_to_hub_refuses_offline(tmp_path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    with pytest.raises(MixbenchError, match="HF_HUB_OFFLINE"):
        push_to_hub(tmp_path, "someone/model")
