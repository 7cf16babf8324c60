"""Reading a task's train and evaluation splits from whichever source holds them.

* GLUE from a local folder: GLUE's original TSV download (``CoLA/train.tsv``, ``MNLI/dev_matched.tsv``...),
  read with ``csv`` and no quoting (GLUE's texts contain bare quotes), or a parquet snapshot of the hub
  dataset (``cola/train-00000-of-00001.parquet``...). The layout is detected per task.
* GLUE from the hub: ``datasets.load_dataset("nyu-mll/glue", config)``.
* The stand-ins: the gzip'd JSONL files vendored in ``standin_data`` (offline, always available).

GLUE's test splits carry no labels, so only train and the validation split(s) are read. Rows that cannot be
used (too few fields, an unknown label) are counted per split, not silently dropped.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from harness.errors import MixbenchError
from suites.glue.tasks import TaskSpec


@dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    label: int | float  # class id, or the score for regression


@dataclass
class TaskData:
    train: list[Example]
    evals: dict[str, list[Example]]  # by evaluation split, in TaskSpec.eval_splits order
    source: str  # where it came from, for the manifest
    skipped: dict[str, int] = field(default_factory=dict)  # unusable rows per split


def load_task(spec: TaskSpec, data_dir: str = "", hub_dataset: str = "nyu-mll/glue") -> TaskData:
    """Train and evaluation examples of ``spec``: stand-ins from the vendored files; GLUE tasks from
    ``data_dir`` when given (TSV or parquet layout), else from the hub."""
    if spec.standin_dir:
        rows = {s: _read_standin(spec.standin_dir, s) for s in ("train", *spec.eval_splits)}
        return _build(spec, rows, f"standin:{spec.standin_dir}")
    if data_dir:
        return _load_local(spec, Path(data_dir).expanduser())
    return _load_hub(spec, hub_dataset)


def _build(spec: TaskSpec, rows: dict[str, Iterable[tuple[Any, Any, Any]]], source: str) -> TaskData:
    """Examples from raw (text_a, text_b, label) rows, counting the rows that are unusable."""
    splits: dict[str, list[Example]] = {}
    skipped: dict[str, int] = {}
    for split, raw_rows in rows.items():
        examples, bad = [], 0
        for a, b, raw_label in raw_rows:
            label = _label(spec, raw_label)
            if label is None or not isinstance(a, str) or (spec.pair and not isinstance(b, str)):
                bad += 1
                continue
            examples.append(Example(a, b if spec.pair else None, label))
        if not examples:
            raise MixbenchError(f"{spec.name}: the {split} split from {source} holds no usable examples.")
        splits[split] = examples
        if bad:
            skipped[split] = bad
    return TaskData(splits.pop("train"), splits, source, skipped)


def _label(spec: TaskSpec, raw: Any) -> int | float | None:
    """A class id (from an id or a class name) or a regression score; None when unusable (e.g. -1, '-')."""
    if isinstance(raw, str):
        raw = raw.strip()
    if spec.regression:
        try:
            return float(raw)
        except (TypeError, ValueError):
            return None
    if isinstance(raw, str) and raw in spec.labels:
        return spec.labels.index(raw)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if 0 <= value < len(spec.labels) else None


# ------------------------------------------------------------------------------------------------ sources


def _read_standin(folder: str, split: str) -> Iterable[tuple[Any, Any, Any]]:
    resource = files("suites.glue").joinpath(f"standin_data/{folder}/{split}.jsonl.gz")
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    text_a = "premise" if "premise" in rows[0] else "sentence"
    return [(r[text_a], r.get("hypothesis"), r["label"]) for r in rows]


def _load_local(spec: TaskSpec, root: Path) -> TaskData:
    assert spec.tsv is not None
    tsv_dir, parquet_dir = root / spec.tsv.folder, root / spec.hub_config
    if (tsv_dir / "train.tsv").is_file():
        rows = {split: _read_tsv(spec, tsv_dir / name) for split, name in spec.tsv.files}
        return _build(spec, rows, f"tsv:{tsv_dir}")
    if parquet_dir.is_dir() and _parquet_files(parquet_dir, "train"):
        rows = {split: _read_parquet(spec, parquet_dir, split) for split in ("train", *spec.eval_splits)}
        return _build(spec, rows, f"parquet:{parquet_dir}")
    raise MixbenchError(
        f"{spec.name}: data_dir {root} holds neither {spec.tsv.folder}/train.tsv (GLUE's TSV download) nor "
        f"{spec.hub_config}/train-*.parquet (a snapshot of the hub dataset); point data_dir at a folder with one."
    )


def _read_tsv(spec: TaskSpec, path: Path) -> list[tuple[Any, Any, Any]]:
    assert spec.tsv is not None
    if not path.is_file():
        raise MixbenchError(f"{spec.name}: {path} is missing from the GLUE folder; download the task again.")
    with open(path, encoding="utf-8-sig", newline="") as f:  # MRPC files start with a BOM
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        columns = spec.tsv.columns
        if spec.tsv.header:
            header = next(reader, [])
            missing = [c for c in columns if c is not None and c not in header]
            if missing:
                raise MixbenchError(
                    f"{spec.name}: {path} has no column(s) {', '.join(map(str, missing))} in its header "
                    f"({', '.join(header)}); is it GLUE's original {spec.tsv.folder} file?"
                )
            columns = tuple(None if c is None else header.index(c) for c in columns)
        ia, ib, il = columns
        need = max(i for i in columns if i is not None)
        return [
            (row[ia], None if ib is None else row[ib], row[il]) if len(row) > need else (None, None, None)
            for row in reader
            if row
        ]


def _parquet_files(folder: Path, split: str) -> list[Path]:
    return sorted([*folder.glob(f"{split}-*.parquet"), *folder.glob(f"{split}.parquet")])


def _read_parquet(spec: TaskSpec, folder: Path, split: str) -> list[tuple[Any, Any, Any]]:
    import pyarrow.parquet as pq  # a dependency of datasets; only needed for this layout

    paths = _parquet_files(folder, split)
    if not paths:
        raise MixbenchError(f"{spec.name}: {folder} has no {split}-*.parquet file; add the split or use the hub.")
    a, b = spec.fields
    rows: list[tuple[Any, Any, Any]] = []
    for path in paths:
        table = pq.read_table(path).to_pydict()
        missing = [c for c in (a, b, "label") if c is not None and c not in table]
        if missing:
            raise MixbenchError(f"{spec.name}: {path} has no column(s) {', '.join(missing)}.")
        rows += zip(table[a], table[b] if b else [None] * len(table[a]), table["label"], strict=True)
    return rows


def _load_hub(spec: TaskSpec, hub_dataset: str) -> TaskData:
    import datasets  # slow to import; only the hub source needs it

    try:
        ds = datasets.load_dataset(hub_dataset, spec.hub_config)
    except Exception as exc:  # offline, unreachable, renamed: all are the user's to fix
        raise MixbenchError(
            f"{spec.name}: {hub_dataset}/{spec.hub_config} could not be loaded from the hub ({type(exc).__name__}); "
            f"offline, pass data_dir=FOLDER (GLUE's TSV download or parquet files) or use the standin-* tasks."
        ) from exc
    a, b = spec.fields
    rows = {}
    for split in ("train", *spec.eval_splits):
        if split not in ds:
            raise MixbenchError(f"{spec.name}: {hub_dataset}/{spec.hub_config} has no {split} split.")
        table = ds[split]
        rows[split] = zip(table[a], table[b] if b else [None] * len(table), table["label"], strict=True)
    return _build(spec, rows, f"hub:{hub_dataset}/{spec.hub_config}")
