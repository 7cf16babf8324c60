"""Training: schedule, weight-decay groups, non-finite loss, and exact resumption after SIGKILL."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.model.backbone import build_model
from harness.model.checkpoint import load_checkpoint, load_model
from harness.config import BackboneConfig, ModelSpec, TrainConfig
from harness.errors import NonFiniteLossError
from harness.running.training import lr_at, param_groups, train
from tests.conftest import TINY_TRAIN


def test_schedule_warmup_then_cosine_to_ten_percent():
    cfg = TrainConfig(token_budget=1, batch_size=1, lr=1.0, warmup_frac=0.02, final_lr_frac=0.1)
    total = 1000
    assert lr_at(0, total, cfg) == pytest.approx(1 / 20)
    assert lr_at(19, total, cfg) == pytest.approx(1.0)
    mid = 20 + (total - 20 - 1) / 2
    assert lr_at(int(mid), total, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 20) / 979)))
    assert lr_at(total - 1, total, cfg) == pytest.approx(0.1)


def test_no_decay_on_norms_biases_prototypes_beta_tau_alpha():
    model = build_model(ModelSpec("protot", {}, BackboneConfig(64, 3, 32, 300)), seed=0)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    undecayed = {names[id(p)] for p in no_decay["params"]}
    decayed = {names[id(p)] for p in decay["params"]}
    for i in range(3):
        assert {f"blocks.{i}.mixer.prototypes", f"blocks.{i}.mixer.beta_logit", f"blocks.{i}.mixer.tau_write",
                f"blocks.{i}.mixer.alpha", f"blocks.{i}.mixer_norm.weight"} <= undecayed
    assert "blocks.2.mixer.tau_read" in undecayed  # (ProtoT's value conv has no bias, as released)
    assert {"embed.weight", "blocks.1.mixer.value.weight", "blocks.0.ffn.gate.weight"} <= decayed
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.1


def test_non_finite_loss_names_the_step(tmp_path):
    from harness.corpus.data import load_corpus
    from harness.model.specs import bind_vocab, make_run_spec

    spec = make_run_spec("attention", "tiny", train_overrides={"lr": 1e12, "token_budget": 40_000},
                         data_overrides={"max_train_docs": 40})
    corpus = load_corpus(spec.data, progress=False)
    with pytest.raises(NonFiniteLossError, match=r"at step \d+ of \d+; lower the learning rate"):
        train(bind_vocab(spec, corpus.tokenizer.vocab_size), tmp_path / "out", corpus, progress=False)


STEPS = 60  # the kill lands between step 20 and the end; each of the three runs is a fresh process


def _train_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "harness.cli", "train", "--mixer", "protot", "--out", str(out), *TINY_TRAIN,
            "--tokens", str(STEPS * 8 * 128), "--checkpoint-every", "10", "--eval-every", "20"]


def test_sigkill_then_resume_reaches_the_same_loss(tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    subprocess.run(_train_cmd(full), check=True, capture_output=True)
    proc = subprocess.Popen(_train_cmd(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill mid-run, once a snapshot past step 20 exists
        latest = killed / "LATEST"
        if latest.exists() and int(latest.read_text().split("-")[1]) >= 20:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = load_checkpoint(killed)
    assert not partial.final and 20 <= partial.step < STEPS, "the kill must land mid-run"
    subprocess.run(_train_cmd(killed), check=True, capture_output=True)  # resumes
    a, b = load_checkpoint(full), load_checkpoint(killed)
    assert a.final and b.final and b.step == a.step == STEPS
    assert b.meta["final_loss"] == a.meta["final_loss"]
    assert b.meta["weights_sha256"] == a.meta["weights_sha256"]  # bit-for-bit the same model
    assert [h for h in b.meta["history"] if h["step"] > partial.step] == [h for h in a.meta["history"] if h["step"] > partial.step]
    assert not list(killed.glob(".tmp-*")) and len(list(killed.glob("step-*"))) == 1


def test_checkpoint_round_trip_is_self_contained(protot_checkpoint):
    model, ckpt = load_model(protot_checkpoint)
    assert ckpt.final and ckpt.tokenizer_path.exists()
    cfg = json.loads((ckpt.path / "config.json").read_text())
    assert cfg["run_spec"]["model"]["mixer"] == "protot" and cfg["parameters"] == model.num_parameters()
    state = ckpt.train_state()
    assert set(state) == {"optimizer", "rng"}
    ids = torch.randint(0, model.config.vocab_size, (1, 12))
    assert torch.isfinite(model(ids)[0]).all()
