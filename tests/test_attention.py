"""The attention mixer against a naive per-position float64 implementation of RoPE attention."""

from __future__ import annotations

import math

import pytest
import torch

from harness import Recorder
from harness.errors import ConfigError
from mixers.attention.layer import Attention, AttentionConfig, apply_rope, rope_tables


def rope_rotate(vec: torch.Tensor, pos: int, theta: float) -> torch.Tensor:
    """Rotate a head vector by its position, pair (i, i + h/2) by angle pos * theta^(-2i/h), one pair at a time."""
    h = vec.shape[-1]
    out = vec.clone()
    for i in range(h // 2):
        angle = pos * theta ** (-2 * i / h)
        a, b = vec[..., i], vec[..., i + h // 2]
        out[..., i] = a * math.cos(angle) - b * math.sin(angle)
        out[..., i + h // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


def naive_attention(layer: Attention, x: torch.Tensor) -> torch.Tensor:
    p = {n: t.detach().double() for n, t in layer.named_parameters()}
    x = x.double()
    B, T, D = x.shape
    H, hd, Hkv = layer.n_heads, layer.head_dim, layer.n_kv_heads
    q = (x @ p["q_proj.weight"].T).view(B, T, H, hd)
    k = (x @ p["k_proj.weight"].T).view(B, T, Hkv, hd)
    v = (x @ p["v_proj.weight"].T).view(B, T, Hkv, hd)
    theta = layer.cfg.rope_theta
    out = torch.zeros(B, T, H, hd, dtype=torch.float64)
    for h in range(H):
        g = h // (H // Hkv)
        for t in range(T):
            qt = rope_rotate(q[:, t, h], t, theta)
            keys = torch.stack([rope_rotate(k[:, s, g], s, theta) for s in range(t + 1)], 1)  # [B, t+1, hd]
            weights = ((keys @ qt[..., None]).squeeze(-1) / math.sqrt(hd)).softmax(-1)
            out[:, t, h] = (weights[..., None] * v[:, : t + 1, g]).sum(1)
    return out.reshape(B, T, D) @ p["o_proj.weight"].T


@pytest.mark.parametrize("kernel", ["naive", "sdpa"])
@pytest.mark.parametrize("kv_heads", [0, 2])
def test_matches_naive_rope_attention(kernel, kv_heads):
    layer = Attention(AttentionConfig(n_heads=4, n_kv_heads=kv_heads, rope_theta=10_000.0), 32, 1, 2)
    layer.set_kernel(kernel)
    x = torch.randn(2, 9, 32)
    y, _ = layer(x)
    assert torch.allclose(y.double(), naive_attention(layer, x), atol=1e-6, rtol=1e-4)


def test_kv_cache_decode_and_prefill_match_forward():
    layer = Attention(AttentionConfig(), 32, 0, 2)
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        y, _ = layer(x)
        _, cache = layer(x[:, :12], layer.init_state(2, x.device, x.dtype))
        y_tail, cache = layer(x[:, 12:19], cache)
        y_last, cache = layer.step(x[:, 19], cache)
    assert torch.allclose(y_tail, y[:, 12:19], atol=1e-6)
    assert torch.allclose(y_last, y[:, 19], atol=1e-6)
    assert cache.length == 20 and layer.state_size(20) == 2 * 20 * 32


def test_head_mask_removes_exactly_that_head():
    layer = Attention(AttentionConfig(n_heads=4), 32, 0, 2)
    x = torch.randn(1, 6, 32)
    with torch.no_grad(), Recorder() as rec:
        layer.set_kernel("naive")
        base, _ = layer(x)
        with layer.intervene([2], "mask"):
            masked, _ = layer(x)
    # the masked output equals the base minus head 2's contribution through o_proj
    probs = rec.get(0, "attention_probs")[:1]  # [1, H, T, T] from the first call
    v = layer.v_proj(x).view(1, 6, 4, 8).transpose(1, 2)
    head2 = (probs[:, 2] @ v[:, 2]).detach()  # [1, T, 8]
    contribution = head2 @ layer.o_proj.weight[:, 16:24].T.detach()
    assert torch.allclose(base - masked, contribution, atol=1e-6)


def test_rope_scores_depend_only_on_relative_position():
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(i: int, j: int) -> float:
        cq, sq = rope_tables(torch.tensor([i]), 16, 500_000.0)
        ck, sk = rope_tables(torch.tensor([j]), 16, 500_000.0)
        return (apply_rope(q, cq, sq) * apply_rope(k, ck, sk)).sum().item()

    assert score(9, 4) == pytest.approx(score(109, 104), rel=1e-4)
    assert score(9, 4) != pytest.approx(score(9, 5), rel=1e-4)


def test_bad_head_count():
    with pytest.raises(ConfigError, match="divisible"):
        Attention(AttentionConfig(n_heads=3), 32, 0, 1)
    with pytest.raises(ConfigError, match="n_kv_heads"):
        AttentionConfig(n_heads=4, n_kv_heads=3)


def test_reference_names_every_mixers_reference_kernel():
    """``--kernel reference`` selects each mixer's first kernel whatever its own name for it (attention's naive,
    DeltaNet's recurrent, ProtoT's recurrent); an unknown name is still refused with the list."""
    from harness.errors import ConfigError
    from harness.registry import MIXERS

    for name in ("attention", "protot", "deltanet", "mamba", "none"):
        entry = MIXERS.get(name)
        layer = entry.cls(entry.make_config({}), 32, 0, 1)
        layer.set_kernel("reference")
        assert layer.kernel == entry.cls.kernels[0], name
    with pytest.raises(ConfigError, match="choose one of"):
        layer.set_kernel("no-such-kernel")
