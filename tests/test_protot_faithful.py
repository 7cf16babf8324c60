"""ProtoT against the released layer's equations (docs/PAPERS.md, "Addendum: ProtoT mixer, exactly as released").

The reference below is written from that list alone, in float64, as the released recurrence (one position at a
time, S and M carried), and it names every weight it uses: a layer with an extra parameter (such as a bias on the
value convolution) cannot load the explicit weights, and at default initialisation the names it has must be the
released ones. Tolerance: 1e-5 relative (Frobenius) in fp32, which the old temperature epsilon (1e-6 instead of
the released 2e-6) exceeds at small |tau|; the last test shows that. Decisions: docs/faithfulness.md.
"""

from __future__ import annotations

import math

import pytest
import torch

from mixers.protot.layer import ProtoT, ProtoTConfig

D, R, T, B = 128, 32, 150, 2  # quick preset's width; T crosses the chunked kernel's 64-position chunks twice
N_LAYERS = 4
TOL = 1e-5
RELEASED_EPS = 2e-6  # the released code adds 1e-6 to |tau| twice
MASS_FLOOR = 1e-6


def released_names(layer_idx: int) -> set[str]:
    names = {"prototypes", "beta_logit", "tau_write", "alpha", "value.weight", "out.weight"}
    if layer_idx >= 1:  # layer 0 reads with its write gate
        names |= {"read_query.weight", "tau_read"}
    if layer_idx < 2:  # layers 0-1 smooth the values; Conv1d(..., groups=C_v, bias=False)
        names |= {"conv.weight"}
    return names


def released_layer(p: dict[str, torch.Tensor], layer_idx: int, x: torch.Tensor, eps: float = RELEASED_EPS) -> torch.Tensor:
    """Items 1-7 of the addendum, float64, a loop over t carrying S and M."""
    p = {k: v.detach().double() for k, v in p.items()}
    x = x.double()
    P = p["prototypes"]
    pi = torch.softmax(x @ P.T / (p["tau_write"].abs() + eps), dim=-1)  # 1
    v = x @ p["value.weight"].T  # 2
    if layer_idx < 2:
        w = p["conv.weight"][:, 0, :]  # [C_v, 5]; the last tap multiplies the current token
        width = w.shape[1]
        conv = torch.zeros_like(v)
        for t in range(x.shape[1]):
            for lag in range(width):
                if t - lag >= 0:
                    conv[:, t] += w[:, width - 1 - lag] * v[:, t - lag]
        v = 0.5 * v + 0.5 * conv
    beta = torch.sigmoid(p["beta_logit"])  # 3
    if layer_idx == 0:  # 6
        rho = pi
    else:
        rho = torch.softmax((x @ p["read_query.weight"].T) @ P.T / (p["tau_read"].abs() + eps), dim=-1)
    Bn, Tn, m = v.shape
    S = torch.zeros(Bn, P.shape[0], m, dtype=torch.float64)
    M = torch.zeros(Bn, P.shape[0], dtype=torch.float64)
    mixed = torch.zeros(Bn, Tn, m, dtype=torch.float64)
    for t in range(Tn):
        PM = S / M.clamp(min=MASS_FLOOR)[..., None]  # 5: strictly past (S_{t-1}, M_{t-1}); PM_0 = 0
        mixed[:, t] = (rho[:, t, :, None] * PM).sum(1)
        S = beta[:, None] * S + ((1 - beta) * pi[:, t])[..., None] * v[:, t, None, :]  # 4
        M = beta * M + (1 - beta) * pi[:, t]
    return p["alpha"] * mixed @ p["out.weight"].T  # 7


def explicit_weights(layer_idx: int, tau: float, seed: int) -> dict[str, torch.Tensor]:
    """Every released weight, drawn at scales where each one moves the output (no default init involved)."""
    g = torch.Generator().manual_seed(seed)
    m = D // 2
    w = {
        "prototypes": torch.nn.functional.normalize(torch.randn(R, D, generator=g), dim=-1),
        "beta_logit": torch.logit(torch.linspace(0.3, 0.99, R)),
        "tau_write": torch.tensor(tau),
        "alpha": torch.tensor(1.3),
        "value.weight": torch.randn(m, D, generator=g) / math.sqrt(D),
        "out.weight": torch.randn(D, m, generator=g) / math.sqrt(m),
    }
    if layer_idx >= 1:
        w["read_query.weight"] = torch.randn(D, D, generator=g) / math.sqrt(D)
        w["tau_read"] = torch.tensor(-tau)  # the sign must not matter: |tau|
    if layer_idx < 2:
        w["conv.weight"] = torch.randn(m, 1, 5, generator=g) * 0.4
    return w


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref).norm() / ref.norm())


def inputs(seed: int) -> torch.Tensor:
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed))  # unit RMS, as after RMSNorm


def check_against_released(layer: ProtoT, params: dict, layer_idx: int, kernel: str, seed: int) -> torch.Tensor:
    """``layer``'s output with ``kernel`` on inputs drawn with ``seed`` equals the released equations' with
    ``params`` (within TOL); returns it."""
    layer.set_kernel(kernel)
    x = inputs(seed=seed)
    with torch.no_grad():
        y, _ = layer(x)
    ref = released_layer(params, layer_idx, x)
    assert rel_err(y, ref) < TOL, rel_err(y, ref)
    return y


@pytest.mark.parametrize("kernel", ["recurrent", "chunked"])
@pytest.mark.parametrize("layer_idx", [0, 1, 2])
@pytest.mark.parametrize("tau", [1.0, 0.1, 0.05])
def test_explicit_weights_match_released_equations(tau, layer_idx, kernel):
    layer = ProtoT(ProtoTConfig(n_prototypes=R), D, layer_idx, N_LAYERS)
    weights = explicit_weights(layer_idx, tau, seed=10 * layer_idx + 1)
    layer.load_state_dict(weights, strict=True)  # fails on any parameter the released layer lacks
    y = check_against_released(layer, weights, layer_idx, kernel, seed=7)
    assert torch.equal(y[:, 0], torch.zeros_like(y[:, 0]))  # y_0 = 0 exactly


@pytest.mark.parametrize("kernel", ["recurrent", "chunked"])
@pytest.mark.parametrize("layer_idx", [0, 1, 3])
def test_default_init_matches_released_equations(layer_idx, kernel):
    torch.manual_seed(100 + layer_idx)
    layer = ProtoT(ProtoTConfig(n_prototypes=R), D, layer_idx, N_LAYERS)
    params = dict(layer.named_parameters())
    assert set(params) == released_names(layer_idx)
    check_against_released(layer, params, layer_idx, kernel, seed=8)


def test_tolerance_separates_the_temperature_epsilons():
    """The check above can fail: at |tau| = 0.05 the old 1e-6 epsilon is further than TOL from the released one."""
    weights = explicit_weights(2, 0.05, seed=21)
    x = inputs(seed=7)
    assert rel_err(released_layer(weights, 2, x, eps=1e-6), released_layer(weights, 2, x)) > TOL
