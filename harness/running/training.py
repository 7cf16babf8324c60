"""Pretraining a mixer model on a corpus, resumable at any instant.

AdamW with weight decay on matrices only (never on norms, biases, scalars or what a mixer lists in
``no_weight_decay``: ProtoT's prototypes, beta logits, temperatures and alpha), linear warm-up over
``warmup_frac`` of the steps then cosine decay to ``final_lr_frac`` of the peak, gradient clipping, bf16
autocast on CUDA, periodic validation and checkpoints. A learning curve (held-out loss on a few fixed validation
windows at log-spaced steps, against tokens and training FLOPs) is stored with the checkpoint for the scaling
suite and the site's curve plots (docs/scaling.md).

Resumption is exact: the batch of step i is a function of (seed, i) alone (``Corpus.train_batch``), and a
snapshot holds the weights, the optimizer state and the RNG state, so a run killed with SIGKILL and resumed
from its last snapshot reaches bit-for-bit the loss of an uninterrupted run on the same machine.

Under torchrun (``dist``, see :mod:`harness.running.distributed`) each rank trains on its slice of the same global
batch inside DistributedDataParallel; losses and validation sums are reduced over ranks, and only rank 0 writes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from harness.model.backbone import MixerLM, build_model
from harness.model.batching import IGNORE_INDEX, batched, collate_windows
from harness.model.checkpoint import load_checkpoint, resolve, save_checkpoint, writer_lock
from harness.config import RunSpec, TrainConfig
from harness.running.distributed import DistEnv, all_mean, all_sum, barrier, wrap
from harness.errors import MixbenchError, NonFiniteLossError
from harness.store.identity import model_identity, train_id
from harness.store.provenance import provenance


@dataclass
class TrainResult:
    checkpoint: Path
    steps: int
    final_loss: float
    val_loss: float | None
    seconds: float
    tokens_per_s: float
    resumed_from: int = 0
    skipped: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)


def param_groups(model: MixerLM, weight_decay: float) -> list[dict[str, Any]]:
    """Split parameters into decayed matrices and everything that must not be decayed."""
    exempt: set[str] = set()
    for i, block in enumerate(model.blocks):
        exempt |= {f"blocks.{i}.mixer.{name}" for name in block.mixer.no_weight_decay()}
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or name in exempt else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def adamw(groups: list[dict[str, Any]], **options: Any) -> torch.optim.AdamW:
    """AdamW over ``groups``, fused (one kernel over every parameter) where torch has that for their device: at
    preset quick 2.3 ms a step on the CPU against 7.0 ms for the default multi-tensor AdamW, the same update up to
    rounding (docs/cpu_kernels.md, "The backbone's elementwise layers")."""
    devices = {p.device.type for g in groups for p in g["params"]}
    return torch.optim.AdamW(groups, fused=bool(devices) and devices <= {"cpu", "cuda"}, **options)


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``total``: warm-up, then cosine to a floor."""
    warmup = max(1, round(cfg.warmup_frac * total))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup - 1)
    floor = cfg.final_lr_frac * cfg.lr
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def lm_loss(model: MixerLM, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of a training batch (the model's fused head and loss)."""
    loss, _ = model(inputs, targets=targets)
    return loss


@torch.no_grad()
def validation_loss(
    model: MixerLM, windows: list, pad_id: int, batch_size: int, device: torch.device, dist: DistEnv | None = None
) -> float:
    """Token-weighted mean cross-entropy over fixed validation windows (split over ranks under torchrun)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    mine = windows[dist.rank :: dist.world_size] if dist is not None else windows
    for chunk in batched(mine, batch_size):
        inputs, targets = collate_windows([w.ids for w in chunk], pad_id)
        logits, _ = model(inputs.to(device))
        total += F.cross_entropy(
            logits.flatten(0, 1).float(), targets.to(device).flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        ).item()
        count += int((targets != IGNORE_INDEX).sum())
    model.train(was_training)
    total, count = all_sum([total, float(count)], dist, device)
    return total / max(count, 1)


def estimate_train_flops(model: MixerLM, tokens: int) -> float:
    """Training FLOPs of ``tokens`` tokens at the model's context: tokens x (forward + backward) per token, each
    mixer's own count (its projections and sequence kernel, attention's scores over the causal window) plus the
    FFNs and the tied head, backward twice the forward (:mod:`harness.model.flops`, docs/flops.md)."""
    from harness.model.flops import train_flops

    return train_flops(model, model.config.context, tokens)


def curve_steps(total_steps: int, points: int) -> list[int]:
    """The optimizer steps at which the learning curve is measured: ``points`` log-spaced steps from 1 to
    ``total_steps`` (rounded, duplicates merged), so early and late training are sampled alike on a log axis."""
    if points < 2 or total_steps < 1:
        return []
    return sorted({max(1, round(total_steps ** (i / (points - 1)))) for i in range(points)})


def train(
    spec: RunSpec,
    out_dir: Path,
    corpus,
    device: str = "cpu",
    kernel: str | None = None,
    progress: bool = True,
    force: bool = False,
    on_step: Callable[[int, float], None] | None = None,
    dist: DistEnv | None = None,
) -> TrainResult:
    """Train ``spec`` into ``out_dir``; resume a partial run there, or return at once if it is complete.

    ``dist`` (from :func:`harness.running.distributed.session`) trains data-parallel under torchrun with the same global
    batch; only rank 0 writes to ``out_dir``, holding its write lock (a second writer stops with a sentence).
    """
    main = dist is None or dist.is_main
    with writer_lock(Path(out_dir)) if main else contextlib.nullcontext():
        return _train(spec, Path(out_dir), corpus, device, kernel, progress, force, on_step, dist)


def _train(
    spec: RunSpec, out_dir: Path, corpus, device: str, kernel: str | None, progress: bool, force: bool,
    on_step: Callable[[int, float], None] | None, dist: DistEnv | None,
) -> TrainResult:
    cfg = spec.train
    main = dist is None or dist.is_main
    if dist is not None:
        dist.check_batch(cfg.batch_size)
    context = spec.model.backbone.context
    total_steps = cfg.steps(context)
    dev = torch.device(device)

    model = build_model(spec.model, seed=cfg.seed).to(dev)
    model.set_kernel(kernel, dev)
    optimizer = adamw(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    start, history, curve, prior_seconds = 0, [], [], 0.0

    existing = resolve(out_dir) if out_dir.exists() else None
    if existing is not None:
        ckpt = load_checkpoint(out_dir)
        if train_id(ckpt.spec) != train_id(spec):
            if not force:
                raise MixbenchError(
                    f"{out_dir} holds a checkpoint of a different run ({ckpt.spec.model.mixer}, train id "
                    f"{train_id(ckpt.spec)}); choose another --out or pass --force to overwrite it."
                )
        elif ckpt.final and not force:
            return TrainResult(
                ckpt.path, ckpt.step, ckpt.meta.get("final_loss", float("nan")), ckpt.meta.get("val_loss"),
                ckpt.meta.get("train_seconds", 0.0), ckpt.meta.get("tokens_per_s", 0.0), ckpt.step, True,
                ckpt.meta.get("history", []),
            )
        elif not ckpt.final:
            model.load_state_dict(ckpt.weights)
            state = ckpt.train_state()
            if state is None:
                raise MixbenchError(f"{ckpt.path} has no train_state.pt, so it cannot be resumed; pass --force.")
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            start = ckpt.step
            history = list(ckpt.meta.get("history", []))
            curve = list(ckpt.meta.get("learning_curve", []))
            prior_seconds = float(ckpt.meta.get("train_seconds", 0.0))

    identity = model_identity(spec, corpus.fingerprint)
    tokenizer_file = out_dir / ".tokenizer.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    if main:
        corpus.tokenizer.save(tokenizer_file)
    val_windows = corpus.eval_windows("validation", context, max_windows=cfg.eval_batches * cfg.batch_size)
    # the learning curve's held-out set: a few fixed validation windows, scored at log-spaced steps
    curve_windows = corpus.eval_windows("validation", context, max_windows=cfg.curve_windows) if cfg.curve_windows \
        else []
    curve_at = set(curve_steps(total_steps, cfg.curve_points)) if curve_windows else set()
    pad_id = corpus.tokenizer.pad_id
    use_autocast = dev.type == "cuda"

    def snapshot(step: int, final: bool, loss: float, val: float | None, seconds: float) -> Path:
        tokens = step * cfg.batch_size * context
        meta = {
            "final": final,
            "total_steps": total_steps,
            "final_loss": loss,
            "val_loss": val,
            "train_seconds": seconds,
            "tokens_seen": tokens,
            "tokens_per_s": (tokens - start * cfg.batch_size * context) / max(seconds - prior_seconds, 1e-9),
            "train_flops": estimate_train_flops(model, tokens),
            "parameters": model.num_parameters(),
            "kernel": model.kernel,
            "device": str(dev),
            "history": history,
            "learning_curve": curve,
            "world_size": dist.world_size if dist is not None else 1,
            "corpus_fingerprint": corpus.fingerprint,
            "model_identity": {"id": identity.id, "parts": identity.parts},
            "data_skipped_rows": getattr(corpus, "skipped_rows", {}),  # rows left out under skip_bad_rows
            "provenance": provenance(),
        }
        state = {"optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}
        return save_checkpoint(out_dir, spec, model, step, meta, tokenizer_file, state)

    model.train()
    forward = wrap(model, dist, dev)  # DDP averages gradients over ranks in backward()
    t0 = time.perf_counter()
    loss_value, val = float("nan"), None
    bar = tqdm(
        total=total_steps, initial=start, disable=not (progress and main), desc=f"train {spec.model.mixer}", unit="step"
    )
    path = out_dir
    for step in range(start, total_steps):
        batch = corpus.train_batch(step, cfg.batch_size, context, cfg.seed)  # the global batch, on every rank
        if dist is not None:
            batch = dist.shard(batch)
        batch = batch.to(dev)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total_steps, cfg)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_autocast):
            loss = lm_loss(forward, batch[:, :-1], batch[:, 1:])
        loss_value = all_mean(loss.detach(), dist).item()  # equal token counts per rank: the global mean
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(
                f"training {spec.model.mixer} stopped: the loss became {loss_value} at step {step + 1} of "
                f"{total_steps}; lower the learning rate (now {cfg.lr}) or check the data."
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip).item()
        optimizer.step()
        done = step + 1
        seconds = prior_seconds + time.perf_counter() - t0
        record: dict[str, Any] = {"step": done, "loss": round(loss_value, 6), "grad_norm": round(grad_norm, 4)}
        is_last = done == total_steps
        if done in curve_at:
            tokens_done = done * cfg.batch_size * context
            curve.append({
                "step": done, "tokens": tokens_done, "flops": estimate_train_flops(model, tokens_done),
                "loss": validation_loss(model, curve_windows, pad_id, cfg.batch_size, dev, dist),
            })
        if is_last or (cfg.eval_every and done % cfg.eval_every == 0):
            val = validation_loss(model, val_windows, pad_id, cfg.batch_size, dev, dist) if val_windows else None
            record["val_loss"] = val
        if "val_loss" in record or done % max(1, total_steps // 500) == 0:
            history.append(record)  # thinned to <= ~500 points so snapshots stay small
        bar.update(1)
        bar.set_postfix(loss=f"{loss_value:.3f}", val=f"{val:.3f}" if val is not None else "-")
        if on_step is not None and main:
            on_step(done, loss_value)
        if main and (is_last or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
            path = snapshot(done, is_last, loss_value, val, seconds)
    bar.close()
    if main:
        tokenizer_file.unlink(missing_ok=True)
    if dist is not None:
        barrier()  # no rank returns before rank 0's final checkpoint exists
        path = resolve(out_dir) or path
    seconds = prior_seconds + time.perf_counter() - t0
    steps_run = total_steps - start
    return TrainResult(
        path, total_steps, loss_value, val, seconds,
        steps_run * cfg.batch_size * context / max(time.perf_counter() - t0, 1e-9), start, False, history,
    )
