"""The suite contract (DESIGN §5).

A suite is registered with ``@register_suite(name, config=SomeConfig)`` and implements
``run(model, context) -> SuiteResult``. Its output is typed: a list of :class:`Metric` plus optional samples
(JSON-ready dicts, e.g. generations) and plot files; the results store writes them under the run directory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # pragma: no cover
    from harness.backbone import MixerLM
    from harness.data import Corpus
    from harness.results import ResultsStore


@dataclass(frozen=True)
class Metric:
    """One number with its direction, uncertainty and sample size."""

    name: str
    value: float
    higher_is_better: bool
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None
    unit: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            raise TypeError(f"metric {self.name}: value must be a number, got {self.value!r}")
        object.__setattr__(self, "value", float(self.value))
        if self.ci_low is not None and self.ci_high is not None and not (
            math.isnan(self.value) or self.ci_low <= self.value <= self.ci_high
        ):
            raise ValueError(f"metric {self.name}: value {self.value} lies outside its CI [{self.ci_low}, {self.ci_high}]")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "higher_is_better": self.higher_is_better,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n": self.n,
            "unit": self.unit,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Metric":
        return Metric(**d)


@dataclass
class SuiteResult:
    metrics: list[Metric]
    samples: list[dict[str, Any]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # suite-specific provenance (windows, splits, settings)


@dataclass
class SuiteContext:
    """What a suite gets besides the model: the corpus/tokenizer it was trained with and a work folder."""

    corpus: "Corpus"
    work_dir: Path
    seed: int = 0
    device: str = "cpu"
    progress: bool = True


class Suite:
    """Base class of suites; ``name`` is set by ``register_suite``."""

    name: ClassVar[str] = ""

    #: metric names shown on the leaderboard by default (empty: all of them)
    headline: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: Any):
        self.cfg = cfg

    def validate(self, model: "MixerLM") -> None:
        """Raise a MixbenchError if this config cannot run on ``model``; called before any data is loaded."""

    def run(self, model: "MixerLM", ctx: SuiteContext) -> SuiteResult:
        raise NotImplementedError

    def aggregate(self, store: "ResultsStore", progress: bool) -> None:
        """Work across runs once this suite's runs are in ``store`` (the judge rates all mixers' generations
        together); called after ``evaluate`` and once at the end of a grid. Default: nothing."""
