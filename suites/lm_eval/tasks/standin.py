"""Loaders of the bundled stand-in lm-eval tasks: read the glue suite's packaged stand-in data, so the task YAMLs
hold no machine path (a path would change the task's fingerprint, and so its runs' identity, per machine)."""

from __future__ import annotations

import gzip
import json
from importlib import resources

import datasets


def load_sentiment(max_examples: int = 1000, **_kwargs) -> dict[str, datasets.Dataset]:
    """The first ``max_examples`` sentiment validation examples as the task's test split."""
    path = resources.files("suites.glue") / "standin_data" / "sentiment" / "validation.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(max_examples), f)]
    return {"test": datasets.Dataset.from_list(rows)}
