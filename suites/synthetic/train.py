"""Training one small model of a mixer per task setting, and the learning-rate sweep around it
(docs/synthetic.md, "Protocol").

A :class:`TaskModel` is a :class:`harness.model.backbone.MixerLM` (the shared backbone with the mixer under test) and
the way a task reads its output: the tied LM head at the target positions, or, for compression, MAD's
auto-encoder decoder that sees only the model's output at the last token. Logits are computed at target
positions only, which keeps MQAR's 8192-token head cheap.

Training is AdamW (decay on matrices only, as :func:`harness.running.training.param_groups`), linear warm-up then cosine
decay (:func:`harness.running.training.lr_at`), gradient clipping, validation accuracy every ``eval_every`` steps, and an
early stop once it reaches ``stop_accuracy`` (zoology's 0.99). The weights with the best validation accuracy are
the ones tested. The sweep tries each (learning rate, weight decay) in order from the same initial weights and
batch order, keeps the best by validation accuracy, and ends as soon as one reaches ``stop_accuracy``.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from harness.kit import MixerLM, RMSNorm, adamw, build_model, lr_at, param_groups
from harness.config import ModelSpec, TrainConfig
from harness.errors import NonFiniteLossError
from suites.synthetic.data import IGNORE, TaskData
from suites.synthetic.scoring import score_split


def sincos_positions(length: int, dim: int) -> torch.Tensor:
    """Fixed 1-D sine-cosine position embeddings [length, dim] (MAD's decoder positions)."""
    half = dim // 2
    inv = 1.0 / (10_000 ** (torch.arange(half, dtype=torch.float32) / max(half - 1, 1)))
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    out = torch.zeros(length, dim)
    out[:, :half], out[:, half:2 * half] = angles.sin(), angles.cos()
    return out


class CompressionDecoder(nn.Module):
    """MAD's hard-wired decoder: (code + position) -> norm, linear, GELU, norm, linear, GELU -> norm, unembed."""

    def __init__(self, d_model: int, vocab_size: int, max_len: int):
        super().__init__()
        self.register_buffer("positions", sincos_positions(max_len, d_model), persistent=False)
        self.mlp = nn.Sequential(RMSNorm(d_model), nn.Linear(d_model, d_model), nn.GELU(),
                                 RMSNorm(d_model), nn.Linear(d_model, d_model), nn.GELU())
        self.unembed = nn.Sequential(RMSNorm(d_model), nn.Linear(d_model, vocab_size))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)

    def forward(self, code: torch.Tensor, length: int) -> torch.Tensor:
        """``code: [B, D]`` -> logits ``[B, length, V]``."""
        x = code[:, None, :] + self.positions[:length].to(code.dtype)[None]
        return self.unembed(self.mlp(x))


class TaskModel(nn.Module):
    """The mixer's language model and how one task reads its output (see the module docstring)."""

    def __init__(self, lm: MixerLM, head: str, max_len: int):
        super().__init__()
        self.lm = lm
        self.head = head
        self.decoder = CompressionDecoder(lm.config.d_model, lm.config.vocab_size, max_len) if head == "compression" else None

    def logits_at(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Logits ``[mask.sum(), V]`` at the positions where ``mask`` is set, in row-major order."""
        h = self.lm.norm(self.lm.hidden_states(inputs)[-1])
        if self.decoder is None:
            return h[mask] @ self.lm.embed.weight.T
        return self.decoder(h[:, -1], inputs.shape[1])[mask]

    @torch.no_grad()
    def predict(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits_at(inputs, mask).argmax(-1)


@dataclass(frozen=True)
class TrainSettings:
    batch_size: int
    max_steps: int
    eval_every: int
    stop_accuracy: float
    warmup_frac: float
    grad_clip: float
    eval_batch_size: int


@dataclass
class Trained:
    """One finished training run: the model with its best validation weights and how it got there."""

    model: TaskModel
    lr: float
    weight_decay: float
    steps: int
    val_accuracy: float
    best_step: int
    stopped_early: bool
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"lr": self.lr, "weight_decay": self.weight_decay, "steps": self.steps, "best_step": self.best_step,
                "val_accuracy": self.val_accuracy, "stopped_early": self.stopped_early,
                "seconds": round(self.seconds, 2)}


def build_task_model(spec: ModelSpec, head: str, seed: int, device: torch.device) -> TaskModel:
    """The mixer's model from ``seed`` alone (:func:`harness.model.backbone.build_model`) and its head."""
    lm = build_model(spec, seed=seed)
    with torch.random.fork_rng(devices=[]):  # the decoder, like build_model, from the seed alone
        torch.manual_seed(seed + 1)
        model = TaskModel(lm, head, spec.backbone.context)
    model.to(device)
    lm.set_kernel(None, device)
    return model


def _optimizer(model: TaskModel, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    groups = param_groups(model.lm, weight_decay)
    if model.decoder is not None:
        params = list(model.decoder.parameters())
        groups[0]["params"] += [p for p in params if p.ndim >= 2]
        groups[1]["params"] += [p for p in params if p.ndim < 2]
    return adamw(groups, lr=lr)


def train_once(
    spec: ModelSpec, head: str, train: TaskData, valid: TaskData, lr: float, weight_decay: float,
    settings: TrainSettings, init_seed: int, order_seed: int, device: torch.device, desc: str, progress: bool,
) -> Trained:
    model = build_task_model(spec, head, init_seed, device)
    optimizer = _optimizer(model, lr, weight_decay)
    schedule = TrainConfig(token_budget=1, batch_size=settings.batch_size, lr=lr, weight_decay=weight_decay,
                           warmup_frac=settings.warmup_frac)
    inputs = torch.from_numpy(train.inputs)
    targets = torch.from_numpy(train.train_targets)
    order = torch.Generator().manual_seed(order_seed)
    n, B = len(train), min(settings.batch_size, len(train))
    perm, cursor = torch.randperm(n, generator=order), 0
    best_acc, best_step, best_state = -1.0, 0, None
    history: list[dict[str, float]] = []
    stopped = False
    t0 = time.perf_counter()
    bar = tqdm(total=settings.max_steps, desc=desc, unit="step", disable=not progress, leave=False)
    step = 0
    running = math.nan
    for step in range(1, settings.max_steps + 1):
        if cursor + B > n:  # a fresh permutation each epoch, from the run's own generator
            perm, cursor = torch.randperm(n, generator=order), 0
        idx = perm[cursor:cursor + B]
        cursor += B
        x, y = inputs[idx].to(device), targets[idx].to(device)
        mask = y != IGNORE
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step - 1, settings.max_steps, schedule)
        model.train()
        loss = F.cross_entropy(model.logits_at(x, mask).float(), y[mask])
        if not torch.isfinite(loss):
            raise NonFiniteLossError(f"synthetic: {desc} reached a non-finite loss at step {step}; "
                                     f"try a smaller learning rate.")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        optimizer.step()
        value = loss.item()
        running = value if math.isnan(running) else 0.9 * running + 0.1 * value
        bar.update(1)
        if step % settings.eval_every == 0 or step == settings.max_steps:
            model.eval()
            acc = score_split(model.predict, valid, settings.eval_batch_size, device).accuracy
            history.append({"step": step, "loss": round(running, 4), "val_accuracy": round(acc, 4)})
            bar.set_postfix(loss=f"{running:.3f}", val=f"{acc:.3f}")
            if acc > best_acc:
                best_acc, best_step = acc, step
                best_state = copy.deepcopy(model.state_dict())
            if acc >= settings.stop_accuracy:
                stopped = True
                break
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return Trained(model, lr, weight_decay, step, best_acc, best_step, stopped, time.perf_counter() - t0, history)


def sweep(
    spec: ModelSpec, head: str, train: TaskData, valid: TaskData, grid: list[tuple[float, float]],
    settings: TrainSettings, init_seed: int, order_seed: int, device: torch.device, desc: str, progress: bool,
) -> tuple[Trained, list[dict[str, Any]]]:
    """Train at each (lr, weight decay) of ``grid`` in order; the best by validation accuracy, and every try."""
    best: Trained | None = None
    tries: list[dict[str, Any]] = []
    for lr, wd in grid:
        run = train_once(spec, head, train, valid, lr, wd, settings, init_seed, order_seed, device,
                         f"{desc} lr={lr:g} wd={wd:g}", progress)
        tries.append(run.summary())
        if best is None or run.val_accuracy > best.val_accuracy:
            best = run
        if run.val_accuracy >= settings.stop_accuracy:
            break
    assert best is not None
    return best, tries

