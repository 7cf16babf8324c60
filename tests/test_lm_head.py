"""The fused vocabulary head and loss (harness.model.lm_head) against F.cross_entropy on the materialised logits."""

import pytest
import torch
import torch.nn.functional as F

from harness.model import lm_head
from harness.model.batching import IGNORE_INDEX


def inputs(dtype, n=70, d=16, vocab=50, ignored=(3, 10, 69), seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=gen, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, d, generator=gen, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    targets[list(ignored)] = IGNORE_INDEX
    return hidden, weight, targets


@pytest.mark.parametrize("dtype, tol, compiled", [(torch.float64, 1e-12, False), (torch.float32, 1e-5, False),
                                                   (torch.float32, 1e-5, True)])
@pytest.mark.parametrize("block", [16, 70, 4096])  # several blocks with a short last one, exactly one, one partial
def test_fused_loss_and_gradients_equal_cross_entropy(dtype, tol, compiled, block, monkeypatch):
    monkeypatch.setattr(lm_head, "BLOCK_ROWS", block)
    hidden, weight, targets = inputs(dtype)
    fused = lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=compiled)
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


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("bad", [50, 10_000, -5])
def test_a_target_outside_the_vocabulary_is_an_error_not_a_number(bad, compiled):
    """A corrupt token id (past the vocabulary, or negative other than the ignore index) must stop training, as
    F.cross_entropy does, not be read as some other row's logit (the C loop would read past the row)."""
    hidden, weight, targets = inputs(torch.float32)
    targets[7] = bad
    with pytest.raises(IndexError, match="outside the vocabulary"):
        lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=compiled)


@pytest.mark.parametrize("compiled", [True, False])
def test_extreme_logits_against_a_float64_reference(compiled):
    """Logits spread over hundreds (differences far below exp's -87 clamp, far above any overflow) and a
    vocabulary that is no multiple of the vector width: loss and gradients equal F.cross_entropy computed in
    float64 to fp32 rounding. This checks the C loop's own exponential over its whole range."""
    gen = torch.Generator().manual_seed(3)
    n, d, vocab = 33, 8, 1001
    hidden = (torch.randn(n, d, generator=gen) * 30).requires_grad_(True)
    weight = torch.randn(vocab, d, generator=gen).requires_grad_(True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    loss = lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=compiled)
    grads = torch.autograd.grad(loss, [hidden, weight])
    h64, w64 = hidden.detach().double().requires_grad_(True), weight.detach().double().requires_grad_(True)
    ref = F.cross_entropy(h64 @ w64.T, targets)
    ref_grads = torch.autograd.grad(ref, [h64, w64])
    assert (h64 @ w64.T).max().item() > 300 and (h64 @ w64.T).min().item() < -300  # the case is extreme
    assert loss.item() == pytest.approx(ref.item(), rel=2e-6)
    for a, b in zip(grads, ref_grads):
        assert (a.double() - b).abs().max() <= 2e-5 * b.abs().max()


@pytest.mark.parametrize("compiled", [True, False])
def test_a_non_finite_hidden_state_makes_the_loss_nan(compiled):
    """A diverged model (a NaN or infinite hidden state, or one NaN weight: a single non-finite logit per row,
    which a max that skips NaN and a clamped exponential would quietly turn into a finite loss) must give a NaN
    loss, which stops training."""
    for where, bad in [("hidden", float("nan")), ("hidden", float("inf")), ("weight", float("nan"))]:
        hidden, weight, targets = inputs(torch.float32)
        targets[targets == 5] = 6
        with torch.no_grad():
            (hidden[11] if where == "hidden" else weight[5])[2] = bad
        loss = lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=compiled)
        assert loss.isnan(), (where, bad)


def test_compiled_on_float64_is_an_error():
    hidden, weight, targets = inputs(torch.float64)
    with pytest.raises(ValueError, match="compiled head loss"):
        lm_head.cross_entropy(hidden, weight, targets, IGNORE_INDEX, compiled=True)


@pytest.mark.parametrize("mixer", ["protot", "attention"])
def test_a_training_step_through_the_model_matches_the_logits_path(mixer):
    """``model(ids, targets=...)``, what training calls, against the loss of ``model(ids)``'s logits: the same
    value and the same gradient for every parameter (the tied embedding gets both of its gradients)."""
    from harness.model.backbone import build_model
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
