"""The glue suite's configuration: which tasks, where their data lives, and the fine-tuning budget."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config import as_tuple
from harness.errors import ConfigError
from harness.values import option
from suites.glue.tasks import ALIASES, STANDIN, expand_tasks

POOLING = ("last", "mean")


@dataclass(frozen=True)
class GlueConfig:
    """Defaults are the full protocol on the offline stand-ins; on a CPU, cap ``max_train_examples`` (see README).

    Hyper-parameters (the learning rate) are chosen on a held-out part of the training split, never on the
    reported validation split, because GLUE's test labels are hidden and validation is what is reported.
    """

    tasks: tuple[str, ...] = ALIASES[STANDIN]  # task names, or the aliases glue / standin
    data_dir: str = ""  # a local GLUE folder (original TSV download or parquet snapshot); "" = the hub
    hub_dataset: str = option("nyu-mll/glue", "hub dataset read when data_dir is empty")
    lrs: tuple[float, ...] = option((1e-4, 3e-4, 1e-3), "AdamW learning-rate grid, chosen on the held-out dev part",
                                    gt=0)
    seeds: tuple[int, ...] = (0, 1, 2)  # fine-tuning seeds; the first also runs the grid
    epochs: int = option(3, "fine-tuning epochs", min=1)
    batch_size: int = option(32, "fine-tuning batch size", min=1)
    max_train_examples: int = option(0, min=0)  # 0 = all of the training split that is not held out
    max_eval_examples: int = option(0, min=0)  # 0 = every validation example; else a fixed random subset per split
    dev_fraction: float = option(0.1, gt=0, lt=1)  # share of the training split held out to choose the learning rate
    max_dev_examples: int = option(1000, "cap on the held-out dev part", min=1)
    max_length: int = option(0, min=0)  # tokens per example after truncation; 0 = the model's context
    pooling: str = option(
        "last", "last: final-norm state of the last non-pad token; mean: mean over non-pad tokens", choices=POOLING
    )
    dropout: float = option(0.1, min=0, lt=1)  # on the pooled representation
    weight_decay: float = option(0.01, "AdamW weight decay", min=0)
    warmup_frac: float = option(0.06, min=0, lt=1)  # linear warm-up, then linear decay to zero
    grad_clip: float = option(1.0, "gradient-norm clip", gt=0)
    bootstrap: int = option(1000, min=0)  # resamples of evaluation examples for the CI when there is a single seed
    data_seed: int = option(
        0, "fixes the held-out dev part and the train/eval subsets, identical for every model", min=0
    )

    def __post_init__(self) -> None:
        tasks = as_tuple(self.tasks, str, "glue: tasks")
        if not tasks:
            raise ConfigError("glue: tasks is empty; name at least one task (or glue / standin).")
        object.__setattr__(self, "tasks", expand_tasks(tasks))
        object.__setattr__(self, "lrs", as_tuple(self.lrs, float, "glue: lrs"))
        object.__setattr__(self, "seeds", as_tuple(self.seeds, int, "glue: seeds"))
        # field limits are option()'s, checked by the parser (docs/values.md); here only what spans fields or items
        if not self.lrs:
            raise ConfigError("glue: lrs is empty; give at least one learning rate.")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"glue: seeds must be distinct integers, got {list(self.seeds)}.")
        if self.max_length and self.max_length < 4:
            raise ConfigError(f"glue: max_length must be 0 (the model's context) or >= 4, got {self.max_length}.")
