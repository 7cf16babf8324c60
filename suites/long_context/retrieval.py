"""Scoring the retrieval tasks by log-likelihood ranking, and the short task fine-tune of a copy of the model
(docs/long_context.md, "Retrieval").

Each candidate is one row ``prefix + candidate`` (so a row never shows another candidate), scored by the summed
log-probability of its answer tokens; the example is right when the true candidate's is the highest (the first
highest: the true one sits at a random row, so a model that ties every candidate is right one time in k).
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from harness.config import TrainConfig
from harness.errors import NonFiniteLossError
from harness.kit import IGNORE_INDEX, adamw, lm_loss, lr_at, param_groups
from suites.long_context.tasks import Example


def _rows(examples: Sequence[Example]) -> torch.Tensor:
    """``[sum of k, length]``: each example's prefix followed by each of its candidates."""
    return torch.from_numpy(np.stack([np.concatenate([e.prefix, c]) for e in examples for c in e.candidates]))


@torch.no_grad()
def candidate_loglik(model, examples: Sequence[Example], batch_rows: int, desc: str = "",
                     progress: bool = False) -> np.ndarray:
    """``[len(examples), k]``: log-likelihood of each candidate's answer tokens after its example's prefix."""
    device = next(model.parameters()).device
    model.eval()
    k = examples[0].candidates.shape[0]
    out = np.zeros((len(examples), k))
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        by_length[len(e.prefix) + e.candidates.shape[1]].append(i)
    per_call = max(1, batch_rows // k)
    bar = tqdm(total=len(examples), desc=desc, unit="ex", disable=not progress, leave=False)
    for index in by_length.values():
        for start in range(0, len(index), per_call):
            chunk = index[start:start + per_call]
            rows = _rows([examples[i] for i in chunk]).to(device)
            answer = examples[chunk[0]].candidates.shape[1]
            logits, _ = model(rows[:, :-1])
            logp = F.log_softmax(logits[:, -answer:].float(), dim=-1)
            ll = logp.gather(-1, rows[:, -answer:, None]).squeeze(-1).sum(-1).double().cpu().numpy()
            out[chunk] = ll.reshape(len(chunk), k)
            bar.update(len(chunk))
    bar.close()
    return out


def correct(examples: Sequence[Example], loglik: np.ndarray) -> np.ndarray:
    """1.0 where the true candidate has the (first) highest log-likelihood, else 0.0."""
    return (loglik.argmax(axis=1) == np.array([e.answer for e in examples])).astype(np.float64)


def fine_tune(model, examples: Sequence[Example], steps: int, batch_size: int, lr: float, seed: int,
              desc: str = "fine-tune", progress: bool = False):
    """A copy of ``model`` trained ``steps`` steps on the true answers of ``examples`` (next-token loss on the
    answer tokens only): AdamW without weight decay, warm-up then cosine (:func:`harness.running.training.lr_at`),
    gradient clipping at 1. The batches walk a seeded permutation; the global RNG state is left as it was."""
    device = next(model.parameters()).device
    tuned = copy.deepcopy(model)
    schedule = TrainConfig(token_budget=1, batch_size=batch_size, lr=lr, weight_decay=0.0, warmup_frac=0.1)
    opt = adamw(param_groups(tuned, 0.0), lr=lr)
    order = np.random.default_rng(seed).permutation(len(examples))
    tuned.train()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)  # dropout, where the backbone has any
        for step in tqdm(range(steps), desc=desc, unit="step", disable=not progress, leave=False):
            batch = [examples[order[(step * batch_size + j) % len(order)]] for j in range(batch_size)]
            by_length: dict[int, list[Example]] = defaultdict(list)
            for e in batch:
                by_length[len(e.prefix)].append(e)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, steps, schedule)
            opt.zero_grad(set_to_none=True)
            for same in by_length.values():  # equal lengths per forward: no padding
                full = torch.from_numpy(np.stack([np.concatenate([e.prefix, e.candidates[e.answer]]) for e in same]))
                targets = full[:, 1:].clone()
                answer = same[0].candidates.shape[1]
                targets[:, :-answer] = IGNORE_INDEX
                loss = lm_loss(tuned, full[:, :-1].to(device), targets.to(device)) * (len(same) / len(batch))
                if not math.isfinite(loss.item()):
                    raise NonFiniteLossError(f"long-context: {desc} reached a non-finite loss at step {step + 1}; "
                                             "lower finetune_lr.")
                loss.backward()
            torch.nn.utils.clip_grad_norm_(tuned.parameters(), 1.0)
            opt.step()
    return tuned.eval()
