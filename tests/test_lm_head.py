"""The fused vocabulary head and loss (harness.lm_head) against F.cross_entropy on the materialised logits."""

import pytest
import torch
import torch.nn.functional as F

from harness import lm_head
from harness.batching import IGNORE_INDEX


def inputs(dtype, n=70, d=16, vocab=50, ignored=(3, 10, 69), seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=gen, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, d, generator=gen, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    targets[list(ignored)] = IGNORE_INDEX
    return hidden, weight, targets


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("block", [16, 70, 4096])  # several blocks with a short last one, exactly one, one partial
def test_fused_loss_and_gradients_equal_cross_entropy(dtype, tol, block, monkeypatch):
    monkeypatch.setattr(lm_head, "BLOCK_ROWS", block)
    hidden, weight, targets = inputs(dtype)
    fused = lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX)
    assert fused.grad_fn is not None and "FusedHeadLoss" in type(fused.grad_fn).__name__
    plain = F.cross_entropy(hidden @ weight.T, targets, ignore_index=IGNORE_INDEX)
    g_fused = torch.autograd.grad(fused * 3.0, [hidden, weight])  # an incoming gradient other than 1
    g_plain = torch.autograd.grad(plain * 3.0, [hidden, weight])
    assert abs(fused.item() - plain.item()) <= tol * abs(plain.item())
    for a, b in zip(g_fused, g_plain):
        assert (a - b).abs().max() <= tol * b.abs().max()


def test_no_counted_target_is_nan_and_without_grad_it_is_the_plain_loss():
    hidden, weight, targets = inputs(torch.float32, n=5, ignored=range(5))
    assert torch.isnan(lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX))
    hidden, weight, targets = inputs(torch.float32)
    with torch.no_grad():
        loss = lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX)
    assert loss.grad_fn is None
    assert loss.item() == pytest.approx(F.cross_entropy(hidden @ weight.T, targets, ignore_index=IGNORE_INDEX).item())


@pytest.mark.parametrize("bad", [50, 10_000, -5])
def test_a_target_outside_the_vocabulary_is_an_error_not_a_number(bad):
    """A corrupt token id (past the vocabulary, or negative other than the ignore index) must stop training, as
    F.cross_entropy does, not be read as some other row's logit."""
    hidden, weight, targets = inputs(torch.float32)
    targets[7] = bad
    with pytest.raises((IndexError, RuntimeError)):
        lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX)


@pytest.mark.parametrize("mixer", ["protot", "attention"])
def test_a_training_step_through_the_model_matches_the_logits_path(mixer):
    """``model(ids, targets=...)``, what training calls, against the loss of ``model(ids)``'s logits: the same
    value and the same gradient for every parameter (the tied embedding gets both of its gradients)."""
    from harness.backbone import build_model
    from harness.config import BackboneConfig, ModelSpec

    model = build_model(ModelSpec(mixer, {}, BackboneConfig(vocab_size=97, d_model=32, n_layers=2, context=40)), seed=0)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 97, (3, 41), generator=gen)
    targets = ids[:, 1:].clone()
    targets[0, -5:] = IGNORE_INDEX  # padding
    fused, _ = model(ids[:, :-1], targets=targets)
    fused_grads = torch.autograd.grad(fused, list(model.parameters()))
    logits, _ = model(ids[:, :-1])
    plain = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    assert fused.item() == pytest.approx(plain.item(), rel=1e-6)
    for (name, _), a, b in zip(model.named_parameters(), fused_grads, plain_grads):
        assert (a - b).abs().max() <= 1e-5 * max(b.abs().max().item(), 1e-3), name
