"""The suite contract (docs/DESIGN.md §5, docs/ARCHITECTURE.md "Suites" and "Metrics").

A suite is registered with ``@register_suite(name, config=SomeConfig)`` and implements
``run(model, context) -> SuiteResult`` (or, for a suite that trains its own small models from a mixer
definition, ``scope = "mixer"`` and :meth:`Suite.run_mixer`). Its output is typed: a list of :class:`Metric`
plus optional samples (JSON-ready dicts, e.g. generations) and plot files; the results store writes them under
the run directory.

A suite owns everything about itself that the rest of the harness shows: which metrics are its headline and
what role each plays (:class:`Metric`), its reduced quickstart configuration (:attr:`Suite.quickstart`), its
section of the published site (:meth:`Suite.site_section`) and any CLI subcommand it adds
(:attr:`Suite.commands`). The core reads these declarations and never a suite's name.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from harness.stats import Interval

if TYPE_CHECKING:  # pragma: no cover
    from harness.model.backbone import MixerLM
    from harness.corpus.data import Corpus
    from harness.store.manifest import RunManifest
    from harness.store.results import ResultsStore, RunRecord

#: what a metric is for on the board: ``score`` votes in ranks and tie groups; ``baseline`` is a floor or
#: chance level that describes the data (unigram perplexity, the majority-class rate); ``speed`` is the other
#: axis of the Pareto view; ``diagnostic`` is shown in full views only.
ROLES = ("score", "baseline", "speed", "diagnostic")


@dataclass(frozen=True)
class ItemValues:
    """The per-item values behind a metric, so that two mixers can be compared on the same items.

    ``ids`` name the items (a document, a pair, a prompt, an example) so that two runs can be joined on them;
    items that share an id (a duplicated pair) form one cluster and count once in paired comparisons. The
    metric must be a monotone function, in the direction of ``higher_is_better``, of the (``weights``-weighted)
    mean of ``values``: accuracy is the mean of 0/1 correctness; perplexity is exp of the token-weighted mean of
    per-document mean NLL, so its items are per-document NLL with token counts as weights and *lower* values
    are better, as for perplexity itself.
    """

    ids: tuple[str, ...]
    values: tuple[float, ...]
    weights: tuple[float, ...] | None = None
    #: the items' scale (``nats/token`` for per-document NLL): a seed spread measured on that scale (a preset's
    #: recipe file, docs/protocol.md "Seeds") applies to every metric whose items share it
    unit: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(str(i) for i in self.ids))
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if len(self.values) != len(self.ids) or (self.weights is not None and len(self.weights) != len(self.ids)):
            raise ValueError("item values: ids, values and weights need one entry per item")
        if self.weights is not None and any(not (w >= 0 and math.isfinite(w)) for w in self.weights):
            raise ValueError("item values: weights must be finite and >= 0")

    def __len__(self) -> int:
        return len(self.ids)

    def to_json(self) -> dict[str, Any]:
        return {
            "ids": list(self.ids),
            "values": [v if math.isfinite(v) else None for v in self.values],
            "weights": None if self.weights is None else list(self.weights),
            "unit": self.unit,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "ItemValues":
        values = [math.nan if v is None else v for v in d["values"]]
        return ItemValues(tuple(d["ids"]), tuple(values), None if d.get("weights") is None else tuple(d["weights"]),
                          str(d.get("unit") or ""))


@dataclass(frozen=True)
class Metric:
    """One number with its direction, role, uncertainty and sample size (docs/DESIGN.md §6, "Metrics are typed").

    ``interval`` says what kind of interval it is (:class:`harness.stats.Interval`); it is never widened to
    contain ``value``. ``unreliable`` is a reason when the suite found that this number measures nothing (a
    judge at chance): such a metric is shown, marked, and never votes. ``role`` defaults to ``diagnostic`` so
    that only what a suite declares a score can rank mixers.

    ``chance`` is what guessing scores on this metric's own scale (the majority-class rate, 0 for MCC, 0.5 for
    a pairwise agreement) and ``perfect`` the best attainable value; with both, the board can rescale the
    metric to 0-100 above chance and tell when every mixer's interval includes chance (a column that measures
    nothing).

    ``null`` names the metric of the same run that holds this quantity for the row's null model (interpretability's
    untrained model of the same architecture): what a column compares with where controls have no value
    (docs/protocol.md, "What votes"). ``units``: the number of units a statistic that grows with them (a maximum
    over units) was computed over; the board compares such a column only at equal numbers. ``positions``: the
    target positions ``[low, high)`` within a window that the metric scores (the board's context-use lines).
    """

    name: str
    value: float
    higher_is_better: bool
    role: str = "diagnostic"
    interval: Interval | None = None
    n: int | None = None
    unit: str = ""
    items: ItemValues | None = None
    unreliable: str | None = None
    chance: float | None = None
    perfect: float | None = None
    null: str = ""
    units: int | None = None
    positions: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"metric name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            raise TypeError(f"metric {self.name}: value must be a number, got {self.value!r}")
        object.__setattr__(self, "value", float(self.value))
        if not isinstance(self.higher_is_better, bool):
            raise TypeError(f"metric {self.name}: higher_is_better must be a bool, got {self.higher_is_better!r}")
        if self.role not in ROLES:
            raise ValueError(f"metric {self.name}: role must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.interval is not None and not isinstance(self.interval, Interval):
            raise TypeError(f"metric {self.name}: interval must be a harness.stats.Interval, got {self.interval!r}")
        if self.n is not None:
            if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
                raise ValueError(f"metric {self.name}: n must be an integer >= 0, got {self.n!r}")
        if self.unreliable is not None and not (isinstance(self.unreliable, str) and self.unreliable.strip()):
            raise ValueError(f"metric {self.name}: unreliable must be a reason (a non-empty string) or None")
        for bound in ("chance", "perfect"):
            value = getattr(self, bound)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"metric {self.name}: {bound} must be a finite number or None, got {value!r}")
                object.__setattr__(self, bound, float(value))
        if self.chance is not None and self.perfect is not None and self.chance == self.perfect:
            raise ValueError(f"metric {self.name}: chance and perfect are both {self.chance}")
        if not isinstance(self.null, str) or self.null == self.name:
            raise ValueError(f"metric {self.name}: null must name another metric of the run, got {self.null!r}")
        if self.units is not None and (isinstance(self.units, bool) or not isinstance(self.units, int)
                                       or self.units < 1):
            raise ValueError(f"metric {self.name}: units must be a positive integer or None, got {self.units!r}")
        if self.positions is not None:
            lo, hi = self.positions
            if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo < hi):
                raise ValueError(f"metric {self.name}: positions must be [low, high) with 0 <= low < high, "
                                 f"got {self.positions!r}")
            object.__setattr__(self, "positions", (lo, hi))

    @property
    def ci_low(self) -> float | None:
        return None if self.interval is None else self.interval.low

    @property
    def ci_high(self) -> float | None:
        return None if self.interval is None else self.interval.high

    @property
    def votes(self) -> bool:
        """Whether this metric may rank mixers: a score that its suite did not mark unreliable."""
        return self.role == "score" and self.unreliable is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "higher_is_better": self.higher_is_better,
            "role": self.role,
            "interval": None if self.interval is None else self.interval.to_json(),
            "n": self.n,
            "unit": self.unit,
            "items": None if self.items is None else self.items.to_json(),
            "unreliable": self.unreliable,
            "chance": self.chance,
            "perfect": self.perfect,
            "null": self.null,
            "units": self.units,
            "positions": None if self.positions is None else list(self.positions),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Metric":
        fields = {"name", "value", "higher_is_better", "role", "interval", "n", "unit", "items", "unreliable",
                  "chance", "perfect", "null", "units", "positions"}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"metric record has unknown field(s) {', '.join(unknown)}")
        return Metric(
            name=d["name"],
            value=math.nan if d.get("value") is None else d["value"],  # written as null because it was NaN / inf
            higher_is_better=d["higher_is_better"],
            role=d["role"],
            interval=None if d.get("interval") is None else Interval.from_json(d["interval"]),
            n=d.get("n"),
            unit=d.get("unit", ""),
            items=None if d.get("items") is None else ItemValues.from_json(d["items"]),
            unreliable=d.get("unreliable"),
            chance=d.get("chance"),
            perfect=d.get("perfect"),
            null=d.get("null") or "",
            units=d.get("units"),
            positions=None if d.get("positions") is None else tuple(d["positions"]),
        )


@dataclass
class SuiteResult:
    metrics: list[Metric]
    samples: list[dict[str, Any]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # suite-specific provenance (windows, splits, settings)


@dataclass(frozen=True)
class AggregateRun:
    """A run a suite's cross-run step (:meth:`Suite.aggregate`) made, for the core to write: suites never write to
    the store themselves (one write path, :func:`harness.running.evaluate.write_aggregate`). ``replace``: overwrite a run
    already in the store (a rating recomputed from a pool that changed)."""

    run_id: str
    manifest: "RunManifest"
    result: SuiteResult
    replace: bool = False


@dataclass
class SuiteContext:
    """What a suite gets besides the model: the corpus/tokenizer it was trained with and a work folder.

    ``corpus`` is ``None`` for mixer-scoped suites (they generate their own data).
    """

    corpus: "Corpus | None"
    work_dir: Path
    seed: int = 0
    device: str = "cpu"
    progress: bool = True


@dataclass(frozen=True)
class SuiteCommand:
    """A CLI subcommand a suite adds (``mixbench judge``); the core gives it ``--results`` and ``--plugin``."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


class SiteKit(Protocol):
    """What the published site offers a suite's :meth:`Suite.site_section`; every helper escapes its input."""

    def escape(self, value: Any) -> str:
        """Text for HTML element content or a quoted attribute."""

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
        """An HTML table; every header and cell is escaped (pass plain values, never HTML)."""

    def plot(self, run: "RunRecord", rel: str, caption: str = "") -> str:
        """A stored plot of ``run`` (``rel`` is an entry of ``run.plots``) as a figure, or ``""`` if absent."""

    def model_label(self, run: "RunRecord") -> str:
        """The escaped board label of the model a run scored (``protot (n_prototypes=4) / quick``)."""

    def run_link(self, run: "RunRecord", text: str) -> str:
        """A link to the run's own page; ``text`` is escaped."""

    def suite_link(self, suite: str, text: str) -> str:
        """A link to another suite's page of the site (``text`` alone, escaped, when that suite has no page)."""

    def newest_per_model(self, runs: "Sequence[RunRecord]") -> "list[RunRecord]":
        """The newest run of each board row among ``runs``, ordered by the rows' labels."""


class Suite:
    """Base class of suites; ``name`` is set by ``register_suite``."""

    name: ClassVar[str] = ""
    #: bump when a change of the suite alters its numbers; part of every run's identity (with a fingerprint of
    #: the suite's source), so the store recomputes exactly the runs of a changed suite
    version: ClassVar[int] = 1
    #: metric names (``fnmatch`` patterns) shown on the board; the first one matched is the suite's column in the
    #: compact view. Empty: all of them
    headline: ClassVar[tuple[str, ...]] = ()
    #: ``model``: scores a trained checkpoint; ``mixer``: trains its own small models from a mixer definition
    #: (its runs are keyed by the mixer's identity and shared by every board row of that mixer and config)
    scope: ClassVar[str] = "model"
    #: numbers depend on the machine (speed): the device and threading policy join the run's identity
    device_dependent: ClassVar[bool] = False
    #: the reduced config ``mixbench quickstart`` runs (a mapping of config overrides); None: not in quickstart
    quickstart: ClassVar[dict[str, Any] | None] = None
    #: CLI subcommands this suite adds
    commands: ClassVar[tuple[SuiteCommand, ...]] = ()
    #: also scores a ``transformers`` causal LM that mixbench did not train (``mixbench eval --hf-model``): the
    #: suite then uses only what :class:`harness.hf.external.ExternalLM` offers (logits, decode states and
    #: ``generate``, ``config.context``/``vocab_size``, ``tokenizer``), never the mixers (docs/huggingface.md)
    external: ClassVar[bool] = False
    #: smaller token budgets, as fractions of the preset's, at which the quickstart also trains every model and
    #: scores it with this suite alone: a suite that reads a trend across budgets (scaling) needs more than one
    quickstart_budgets: ClassVar[tuple[float, ...]] = ()

    def __init__(self, cfg: Any):
        self.cfg = cfg

    def validate(self, model: "MixerLM") -> None:
        """Raise a MixbenchError if this config cannot run on ``model``. The core calls it once, before :meth:`run`
        (:func:`harness.running.evaluate.score_run`); ``run`` need not call it again."""

    def identity_parts(self) -> dict[str, Any]:
        """What the config points at and its numbers depend on, beyond the config's own values (the content of a
        task file or a pairs file, an external package's version): joins the run's identity. Default: nothing."""
        return {}

    def run(self, model: "MixerLM", ctx: SuiteContext) -> SuiteResult:
        raise NotImplementedError

    def run_mixer(self, mixer: str, mixer_config: dict[str, Any], ctx: SuiteContext) -> SuiteResult:
        """For ``scope = "mixer"`` suites: train and score the suite's own models of ``mixer``."""
        raise NotImplementedError

    def aggregate(self, store: "ResultsStore", progress: bool) -> list[AggregateRun]:
        """Work across runs once this suite's runs are in ``store`` (the judge rates all mixers' generations
        together); called after ``evaluate`` and once at the end of a grid. It reads the store and returns the
        runs it made, which the core writes (:func:`harness.running.evaluate.write_aggregate`). Default: nothing."""
        return []

    @classmethod
    def site_section(cls, runs: "list[RunRecord]", kit: SiteKit) -> str:
        """HTML for this suite's page of the published site, from its own runs (with samples); build it only
        from ``kit``'s helpers, which escape everything. Default: nothing beyond the generic metric tables."""
        return ""
