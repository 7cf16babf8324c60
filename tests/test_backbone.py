"""The backbone: shapes, presets, and generation through each mixer's step() decoding."""

from __future__ import annotations

import pytest
import torch

from harness.model.backbone import build_model, sample_next
from harness.config import PRESETS, BackboneConfig, ModelSpec, get_preset
from harness.errors import ConfigError

MIXERS = ["protot", "attention"]


def tiny(mixer: str, **kw) -> torch.nn.Module:
    return build_model(ModelSpec(mixer, {}, BackboneConfig(d_model=32, n_layers=2, context=24, vocab_size=50, **kw)), seed=0)


def test_presets_are_the_public_ones():
    assert list(PRESETS) == ["tiny", "quick", "paper-small", "paper-large", "long"]
    assert [(p.backbone["d_model"], p.backbone["n_layers"], p.backbone["context"]) for p in PRESETS.values()] == [
        (64, 2, 128), (128, 4, 256), (256, 6, 256), (512, 12, 512), (64, 4, 1024)]
    assert BackboneConfig(**get_preset("paper-small").backbone, vocab_size=10).ffn_dim == 688  # int(2.7 h)//16*16


@pytest.mark.parametrize("mixer", MIXERS)
def test_generation_uses_step_and_matches_recomputation(mixer, monkeypatch):
    model = tiny(mixer).eval()
    calls = {"n": 0}
    real_step = type(model.mixers[0]).step

    def counting_step(self, x_t, state):
        calls["n"] += 1
        return real_step(self, x_t, state)

    monkeypatch.setattr(type(model.mixers[0]), "step", counting_step)
    prompt = torch.randint(0, 50, (2, 5))
    out = model.generate(prompt, max_new_tokens=8, temperature=0)
    assert calls["n"] == 2 * 7  # 2 layers x (8 - 1) decode steps after the prefill
    # greedy decoding equals the argmax of a full forward over the growing sequence
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            nxt = model(seq)[0][:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    assert torch.equal(out, seq)


def test_attention_refuses_contexts_past_training_but_protot_extrapolates():
    with pytest.raises(ConfigError, match="longer than this attention model supports"):
        tiny("attention").generate(torch.zeros(1, 20, dtype=torch.long), max_new_tokens=10)
    out = tiny("protot").generate(torch.zeros(1, 20, dtype=torch.long), max_new_tokens=10, temperature=0)
    assert out.shape == (1, 30)


def test_sampling_filters():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    gen = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 2, 1.0, gen)) for _ in range(200)}
    assert draws == {2, 3}  # top-k 2
    probs = torch.softmax(logits, -1)[0]  # 0.032, 0.087, 0.237, 0.644
    draws = {int(sample_next(logits, 1.0, 0, 0.7, gen)) for _ in range(200)}
    assert draws == {2, 3} and probs[3] < 0.7 < probs[3] + probs[2]
    assert int(sample_next(logits, 0.0, 0, 1.0, gen)) == 3


def test_stop_token_pads_finished_sequences():
    model = tiny("protot")
    out = model.generate(torch.zeros(3, 2, dtype=torch.long), 12, temperature=1.0, stop_token=7,
                         generator=torch.Generator().manual_seed(1))
    for row in out[:, 2:]:
        hits = (row == 7).nonzero()
        if len(hits):
            assert torch.all(row[hits[0, 0]:] == 7)


def test_parameters_differ_only_in_the_mixer():
    a, b = tiny("protot"), tiny("attention")
    shared = {n for n, _ in a.named_parameters() if ".mixer." not in n}
    assert shared == {n for n, _ in b.named_parameters() if ".mixer." not in n}
