"""ProtoT: the prototype mixer (docs/PAPERS.md §A.2 and its addendum), a linear-cost, interpretable mixer.

R learnable prototypes P_k define R channels. Token x_j writes its value V x_j into channel k with weight
pi_jk = softmax_k(x_j . P_k / |tau_w|); each channel keeps a time-discounted, mass-normalised mean of the
strictly-past writes with its own decay beta_k = sigmoid(gamma_k); token x_i reads the channels with
rho_ik = softmax_k((W x_i) . P_k / |tau_r|) and the mixer outputs y_i = alpha * U(sum_k rho_ik PM_k(i)).

Faithfulness decisions (where the paper, the released code and the task text meet):

* The running sums carry the released code's (1 - beta) factor (S <- beta S + (1 - beta) pi v); it cancels in
  the ratio S / M except where the mass floor (1e-6) is active, which is where the released code differs.
* Temperatures are used as |tau| + 2e-6 (``TAU_EPS``), as released: the released code adds 1e-6 when it builds tau
  and again in its routing; at |tau| <= 0.1 a single 1e-6 moves outputs by > 1e-5 relative (docs/faithfulness.md).
* Prototypes start as unit-normed N(0, 1/d) vectors and are not re-normed during training; beta starts at 0.9
  (half-life 6.6 tokens); alpha (one per layer) starts at 1.
* Layers ``< conv_layers`` (0 and 1) smooth the value stream with a causal depthwise conv of width 5 and no bias
  (released: ``Conv1d(..., groups=C_v, bias=False)``): v <- 0.5 v + 0.5 conv(v); routing and reads use the raw
  input. PyTorch's default bias would add a learnable offset that, at init, is 3-4x the layer's own output norm.
* Layers ``< shared_routing_layers`` (layer 0) read with the write gate itself (no W, no tau_r) and start
  tau_w at 3.0. A read mask there has no effect (the read gate *is* the write gate); a write mask masks both.
* No positional embedding: the discount is the only position signal, so the mixer extrapolates in length.
* The EMA is exact (both kernels); the released ``beta^s * cumsum(x / beta^s)`` formula is not reproduced.
* Interventions: ``write-mask`` / ``read-mask`` set the masked prototypes' logits to -inf so the other R-1
  renormalise (the paper's v2 hooks); ``reinit`` swaps the chosen prototypes for fresh unit vectors drawn from
  a generator seeded by (layer, prototype) and resets their decay to the initial beta, restoring both after.

Decode state per sequence: S (R x d/2), M (R) and, in conv layers, the last 4 values: O(1) in the length.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.errors import ConfigError
from harness.mixer import FlopCount, KernelBenchmark, Mixer, Unit
from harness.recording import record, recording
from harness.registry import register_mixer
from harness.values import option
from mixers.protot.kernel import DEFAULT_CHUNK, chunk_length, chunked_flops, prefix_mean_chunked
from mixers.protot.reference import prefix_mean_recurrent
from mixers.protot.routing import prefix_mean_gla, triton_gla

#: the prefix-mean kernels by name (docs/protot_kernels.md); here rather than beside the definition, which then
#: imports none of the kernels that are checked against it
KERNELS = {"recurrent": prefix_mean_recurrent, "chunked": prefix_mean_chunked, "gla": prefix_mean_gla}

TAU_EPS = 2e-6
"""Added to |tau| before dividing the gate logits: the released layer's 1e-6, applied twice (docs/faithfulness.md)."""


@dataclass(frozen=True)
class ProtoTConfig:
    n_prototypes: int = option(32, "R: prototypes (channels) per layer", min=1)
    beta_init: float = option(0.9, "initial decay of every channel's running mean", gt=0, lt=1)
    tau_init: float = option(1.0, "initial write/read temperature", gt=0)
    shared_tau_init: float = option(3.0, "initial temperature of the shared-routing layers", gt=0)
    shared_routing_layers: int = option(1, "the first N layers read with their write gate", min=0)
    conv_layers: int = option(2, "the first N layers smooth values with a causal conv", min=0)
    conv_width: int = option(5, "width of that causal depthwise conv", min=1)
    mass_floor: float = option(1e-6, "floor of a channel's mass in the running mean's division", gt=0)
    chunk_size: int = option(DEFAULT_CHUNK, "tokens per block of the chunked kernel (same result for any)", min=1)



@register_mixer("protot", config=ProtoTConfig)
class ProtoT(Mixer):
    quickstart = True  # one of the paper's four mixers: trained and scored by `mixbench quickstart`
    version = 2  # 2: value conv without bias, temperature epsilon 2e-6, as released (docs/faithfulness.md)
    kernels = ("recurrent", "chunked", "gla")
    length_extrapolation = True
    intervention_modes = ("write-mask", "read-mask", "reinit")

    def __init__(self, cfg: ProtoTConfig, d_model: int, layer_idx: int, n_layers: int):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        if d_model % 2:
            raise ConfigError(f"protot: d_model must be even (values have d_model/2 channels), got {d_model}.")
        R, d = cfg.n_prototypes, d_model
        self.value_dim = d // 2
        self.shared_routing = layer_idx < cfg.shared_routing_layers
        self.has_conv = layer_idx < cfg.conv_layers

        self.prototypes = nn.Parameter(F.normalize(torch.randn(R, d) / math.sqrt(d), dim=-1))
        self.beta_logit = nn.Parameter(torch.full((R,), math.log(cfg.beta_init / (1 - cfg.beta_init))))
        self.tau_write = nn.Parameter(torch.tensor(cfg.shared_tau_init if self.shared_routing else cfg.tau_init))
        self.alpha = nn.Parameter(torch.tensor(1.0))
        self.value = nn.Linear(d, self.value_dim, bias=False)  # V: d -> d/2
        self.out = nn.Linear(self.value_dim, d, bias=False)  # U: d/2 -> d
        nn.init.normal_(self.value.weight, 0.0, 0.02)  # out: initialised by the backbone (output_projection)
        if not self.shared_routing:
            self.read_query = nn.Linear(d, d, bias=False)  # W: d -> d
            self.tau_read = nn.Parameter(torch.tensor(cfg.tau_init))
            nn.init.normal_(self.read_query.weight, 0.0, 0.02)
        if self.has_conv:
            self.conv = nn.Conv1d(self.value_dim, self.value_dim, cfg.conv_width, groups=self.value_dim, bias=False)
        self._write_mask: torch.Tensor | None = None
        self._read_mask: torch.Tensor | None = None

    # ------------------------------------------------------------------ contract
    def default_kernel(self, device: torch.device) -> str:
        """CPU: the chunked kernel; CUDA: fla's Triton GLA kernel where it imports (docs/protot_kernels.md)."""
        return "gla" if torch.device(device).type == "cuda" and triton_gla() is not None else "chunked"

    def kernel_benchmark(self, batch: int, seq_len: int, device: torch.device) -> KernelBenchmark:
        """Forward + backward of this layer's kernel at its own decays, with the chunked algorithm's FLOPs."""
        log_beta = F.logsigmoid(self.beta_logit.detach())
        return kernel_benchmark(self.kernel, log_beta, self.cfg.mass_floor, self.cfg.chunk_size, self.value_dim,
                                batch, seq_len, torch.device(device))

    def flops_per_token(self, context: int) -> FlopCount:
        """Write logits ``2 d R``, values ``V`` and output ``U`` (``2 d m`` each, m = d/2), in layers that read
        with their own gate the read query ``W`` (``2 d^2``) and read logits (``2 d R``), in conv layers the
        value conv (``2 m conv_width``); the recurrent kernel (the definition): per position and channel the read
        ``PM = S / M`` and its weighting by rho (3 per value float: a division and a multiply-add), the decay,
        write and sum of ``S`` (3 per value float) and 3 for the mass (its floor, decay and write):
        ``6 R m + 3 R`` (docs/flops.md). The gates' softmaxes are elementwise and not counted."""
        d, R, m = self.d_model, self.cfg.n_prototypes, self.value_dim
        products = 2 * d * R + 4 * d * m
        if not self.shared_routing:
            products += 2 * d * d + 2 * d * R
        if self.has_conv:
            products += 2 * m * self.cfg.conv_width
        return FlopCount.training(products + 6 * R * m + 3 * R)

    def output_projection(self) -> nn.Linear:
        return self.out

    def no_weight_decay(self) -> set[str]:
        return {"prototypes"}

    def init_state(self, batch_size: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        R, m = self.cfg.n_prototypes, self.value_dim
        state = {
            "sums": torch.zeros(batch_size, R, m, device=device, dtype=dtype),
            "mass": torch.zeros(batch_size, R, device=device, dtype=dtype),
        }
        if self.has_conv:
            state["conv"] = torch.zeros(batch_size, self.cfg.conv_width - 1, m, device=device, dtype=dtype)
        return state

    def chunk_lengths(self) -> tuple[int, ...]:
        return (self.cfg.chunk_size,)

    def state_size(self, seq_len: int) -> int:
        R, m = self.cfg.n_prototypes, self.value_dim
        return R * m + R + (self.cfg.conv_width - 1) * m * self.has_conv

    def forward(self, x: torch.Tensor, state: dict[str, torch.Tensor] | None = None):
        B, T, _ = x.shape
        write_logits = (x @ self.prototypes.T) / (self.tau_write.abs() + TAU_EPS)
        pi = self._gate(write_logits, self._write_mask)
        if self.shared_routing:
            rho = pi
        else:
            read_logits = (self.read_query(x) @ self.prototypes.T) / (self.tau_read.abs() + TAU_EPS)
            rho = self._gate(read_logits, self._read_mask)

        values = self.value(x)
        conv_tail = None
        if self.has_conv:
            history = state["conv"] if state is not None else values.new_zeros(B, self.cfg.conv_width - 1, self.value_dim)
            padded = torch.cat([history, values], dim=1)
            smoothed = F.conv1d(padded.transpose(1, 2), self.conv.weight, groups=self.value_dim)
            conv_tail = padded[:, padded.shape[1] - (self.cfg.conv_width - 1) :]
            values = 0.5 * values + 0.5 * smoothed.transpose(1, 2)

        log_beta = F.logsigmoid(self.beta_logit)
        writes = pi * torch.sigmoid(-self.beta_logit)  # (1 - beta_k) * pi
        if state is None:
            sums0 = x.new_zeros(B, self.cfg.n_prototypes, self.value_dim)
            mass0 = x.new_zeros(B, self.cfg.n_prototypes)
        else:
            sums0, mass0 = state["sums"], state["mass"]
        kernel = prefix_mean(self.kernel, self.cfg.chunk_size)
        mixed, sums, mass = kernel(writes, values, rho, log_beta, sums0, mass0, self.cfg.mass_floor)
        if recording():
            record(self.layer_idx, "write_gate", pi)
            record(self.layer_idx, "read_gate", rho)
        y = self.alpha * self.out(mixed)
        if state is None:
            return y, None
        new_state = {"sums": sums, "mass": mass}
        if conv_tail is not None:
            new_state["conv"] = conv_tail
        return y, new_state

    def step(self, x_t: torch.Tensor, state: dict[str, torch.Tensor]):
        kernel = self.kernel
        self.kernel = "recurrent"  # one position: the definition is the O(1) update
        try:
            y, state = self.forward(x_t.unsqueeze(1), state)
        finally:
            self.kernel = kernel
        return y.squeeze(1), state

    @staticmethod
    def _gate(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is not None:
            logits = logits.masked_fill(mask, float("-inf"))
        return logits.softmax(-1)

    # ------------------------------------------------------------------ interpretability
    def betas(self) -> torch.Tensor:
        return torch.sigmoid(self.beta_logit.detach())

    def units(self) -> list[Unit]:
        betas = self.betas().tolist()
        return [
            Unit(
                self.layer_idx,
                k,
                "prototype",
                {"beta": b, "half_life": -math.log(2) / math.log(b) if 0 < b < 1 else math.inf},
            )
            for k, b in enumerate(betas)
        ]

    @contextlib.contextmanager
    def intervene(self, unit_ids: Sequence[int], mode: str) -> Iterator[None]:
        ids = self._check_intervention(unit_ids, mode, self.cfg.n_prototypes)
        R = self.cfg.n_prototypes
        if mode in ("write-mask", "read-mask"):
            mask = torch.zeros(R, dtype=torch.bool, device=self.prototypes.device)
            mask[ids] = True
            attr = "_write_mask" if mode == "write-mask" else "_read_mask"
            previous = getattr(self, attr)
            combined = mask if previous is None else previous | mask  # nested interventions add up
            if combined.all():  # the softmax over no prototype at all would be NaN
                raise ConfigError("protot: masking every prototype leaves nothing to renormalise over.")
            setattr(self, attr, combined)
            try:
                yield
            finally:
                setattr(self, attr, previous)
            return
        saved_p = self.prototypes.data[ids].clone()
        saved_b = self.beta_logit.data[ids].clone()
        for k in ids:
            gen = torch.Generator().manual_seed(1_000_003 * self.layer_idx + k)
            fresh = torch.randn(self.d_model, generator=gen)
            self.prototypes.data[k] = F.normalize(fresh, dim=0).to(self.prototypes)
        self.beta_logit.data[ids] = math.log(self.cfg.beta_init / (1 - self.cfg.beta_init))
        try:
            yield
        finally:
            self.prototypes.data[ids] = saved_p
            self.beta_logit.data[ids] = saved_b


def prefix_mean(kernel: str, chunk: int) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Kernel ``kernel`` as a function of (w, v, rho, log_beta, S0, M0, floor): the definition takes no chunk."""
    fn = KERNELS[kernel]
    return fn if kernel == "recurrent" else functools.partial(fn, chunk=chunk)


def kernel_benchmark(
    kernel: str, log_beta: torch.Tensor, floor: float, chunk: int, m: int, batch: int, seq_len: int,
    device: torch.device,
) -> KernelBenchmark:
    """One forward + backward of ``kernel`` on synthetic inputs of this shape at the layer's own decays.

    Write weights are softmax gates times (1 - beta), as the layer makes them; inputs are built once, outside
    ``run``; the FLOP count is :func:`chunked_flops` (forward + backward) for every kernel.
    """
    R = log_beta.numel()
    gen = torch.Generator().manual_seed(0)
    lb = log_beta.detach().float().cpu()
    w = torch.rand(batch, seq_len, R, generator=gen).softmax(-1) * -torch.expm1(lb)
    v = torch.randn(batch, seq_len, m, generator=gen)
    rho = torch.rand(batch, seq_len, R, generator=gen).softmax(-1)
    d_out = torch.randn(batch, seq_len, m, generator=gen).to(device)
    leaves = [t.to(device).requires_grad_(True) for t in (w, v, rho, lb)]
    state = (torch.zeros(batch, R, m, device=device), torch.zeros(batch, R, device=device))
    fn = prefix_mean(kernel, chunk)

    def run() -> None:
        for t in leaves:
            t.grad = None
        out, _, _ = fn(*leaves, *state, floor)
        out.backward(d_out)

    C = chunk_length(chunk, seq_len)
    return KernelBenchmark(run, chunked_flops(batch, seq_len, R, m, C, backward=True), f"{kernel} forward+backward")
