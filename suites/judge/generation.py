"""The shared prompt set and each model's continuations of it.

Prompts are text, not token ids, so mixers with different tokenizers still answer the same question. By default
they are the first ``prompt_words`` words from sentence starts of a held-out split, taken at evenly spaced
positions over the split (deterministic and spread over documents); or a user's JSONL file with a ``prompt``
field per line (and an optional ``id``).

Each continuation is sampled through the mixer's ``step()`` decoding (``MixerLM.generate``) with a generator
seeded by (seed, prompt id): a prompt's continuation does not depend on which other prompts are in the set.
The prompt is preceded by end-of-text, as every document is in training, and cut from the left if prompt plus
continuation would exceed the model's context.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from harness.config import content_hash, to_dict
from harness.errors import ConfigError, MixbenchError

if TYPE_CHECKING:  # pragma: no cover
    from harness.kit import Corpus, MixerLM

_SENTENCE_START = re.compile(r"(?:^|(?<=[.!?])\s+)(?=[A-Z\"'(])")


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


@dataclass(frozen=True)
class Decoding:
    """Sampling settings recorded with every generation run (defaults: the ProtoT code's T, top-k, top-p)."""

    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int


def corpus_prompts(corpus: "Corpus", split: str, n: int, words: int) -> list[Prompt]:
    """``n`` prompts of ``words`` words from sentence starts of ``split``, evenly spaced over the split."""
    if split not in corpus.documents:
        raise ConfigError(f"judge: unknown split '{split}'; use one of {', '.join(corpus.documents)}.")
    candidates: list[Prompt] = []
    for doc in corpus.documents[split]:
        for i, m in enumerate(_SENTENCE_START.finditer(doc.text)):
            head = doc.text[m.start():].split(maxsplit=words)
            if len(head) > words and "\n" not in " ".join(head[:words]):
                candidates.append(Prompt(f"{doc.id}@{m.start()}", " ".join(head[:words])))
    if len(candidates) < n:
        raise MixbenchError(
            f"judge: the {split} split has {len(candidates)} usable sentence starts, fewer than n_prompts={n}; "
            "lower n_prompts or prompt_words, or pass a prompts file."
        )
    return [candidates[(j * len(candidates)) // n] for j in range(n)]


def file_prompts(path: str, n: int) -> list[Prompt]:
    """Prompts from a JSONL file (``{"prompt": ..., "id": ...}`` per line); the first ``n`` (0 = all)."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise MixbenchError(f"judge: cannot read prompts file {path} ({exc.strerror}); check the path.") from None
    prompts: list[Prompt] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            text = row["prompt"]
        except (ValueError, KeyError, TypeError):
            raise MixbenchError(f"judge: {path} line {number} is not a JSON object with a 'prompt' field.") from None
        if not isinstance(text, str) or not text.strip():
            raise MixbenchError(f"judge: {path} line {number}: 'prompt' must be a non-empty string.")
        prompts.append(Prompt(str(row.get("id", f"line{number}")), text.strip()))
    if len({p.id for p in prompts}) != len(prompts):
        raise MixbenchError(f"judge: {path} has duplicate prompt ids; give each line a unique 'id'.")
    if not prompts:
        raise MixbenchError(f"judge: {path} holds no prompts.")
    return prompts[:n] if n else prompts


def generation_key(prompts: list[Prompt], decoding: Decoding) -> str:
    """What makes two generation runs comparable: the same prompt texts and the same decoding settings."""
    return content_hash({"prompts": [(p.id, p.text) for p in prompts], "decoding": to_dict(decoding)})


@torch.no_grad()
def generate(model: "MixerLM", corpus: "Corpus", prompts: list[Prompt], decoding: Decoding,
             progress: bool = True) -> list[dict[str, Any]]:
    """One continuation per prompt, as sample rows (stored raw; escaping happens where they are rendered)."""
    tok = corpus.tokenizer
    device = next(model.parameters()).device
    context = model.config.context
    keep = context - decoding.max_new_tokens
    if keep < 2:
        raise ConfigError(f"judge: max_new_tokens={decoding.max_new_tokens} leaves no room for a prompt in "
                          f"the model's context of {context}.")
    rows = []
    for prompt in tqdm(prompts, desc="judge: generating", unit="prompt", disable=not progress, leave=False):
        ids = [tok.eos_id, *tok.encode(prompt.text)][-keep:]
        generator = torch.Generator(device=device).manual_seed(int(content_hash([decoding.seed, prompt.id]), 16))
        out = model.generate(
            torch.tensor([ids], device=device), decoding.max_new_tokens, decoding.temperature, decoding.top_k,
            decoding.top_p, generator, stop_token=tok.eos_id,
        )[0, len(ids):].tolist()
        finished = tok.eos_id in out
        new = out[: out.index(tok.eos_id)] if finished else out
        rows.append({
            "prompt_id": prompt.id, "prompt": prompt.text, "output": tok.decode(new).strip(),
            "prompt_tokens": len(ids), "output_tokens": len(new), "finished": finished,
        })
    return rows


def distinct_bigrams(texts: list[str]) -> float:
    """Distinct word bigrams / all word bigrams over the outputs: low values flag stuck repetition."""
    bigrams = [tuple(ws[i:i + 2]) for t in texts for ws in [t.split()] for i in range(len(ws) - 1)]
    return len(set(bigrams)) / len(bigrams) if bigrams else float("nan")
