"""Recipe files: each mixer's training values chosen on validation by ``mixbench tune``, one file per preset, which
the preset loads (docs/protocol.md, "Tuned per mixer").

One learning rate for every mixer favours whichever architecture it happens to suit; the field tunes it per model
(zoology and MAD sweep it per architecture, the Mamba paper tuned its Transformer baseline). A recipe file holds,
per mixer and mixer config, the values chosen (``values``: training-config fields such as ``lr``), the validation
loss of every grid point with its interval, the seed and the commit, what the search cost, and the seed spread of
the validation loss at the chosen values, which the board uses to tell a difference from training noise
(docs/protocol.md, "Seeds").

Where recipes are found, first match wins per mixer: the file named by ``MIXBENCH_RECIPES`` (a file or a folder
of ``<preset>.json``), ``recipes/<preset>.json`` in the working directory (where ``mixbench tune`` writes by
default: a user's own mixers), then the project's own ``harness/recipes/<preset>.json`` (the built-in mixers and
controls). A model trained with its recipe's values is ``tuned``; any other is marked on the board.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.config import canonical_json
from harness.errors import ConfigError, MixbenchError

RECIPE_SCHEMA = 1
#: the recipes the project ships, one per preset
SHIPPED = Path(__file__).resolve().parents[1] / "recipes"
#: where ``mixbench tune`` writes, relative to the working directory, and the second place looked in
LOCAL = Path("recipes")
#: the item scale of the seed spread tune measures: held-out NLL per token, in nats
NLL_SCALE = "nats/token"
#: the status a model's recipe has on the board (``Subject.recipe``)
TUNED, UNTUNED, OVERRIDDEN = "tuned", "untuned", "overridden"


@dataclass(frozen=True)
class GridPoint:
    """One tried setting: its values, the validation NLL per token with a bootstrap interval over documents, and
    the seconds it took (training and scoring)."""

    values: dict[str, Any]
    val_nll: float
    low: float
    high: float
    seconds: float


@dataclass(frozen=True)
class RecipeEntry:
    """One mixer config's tuned values and the search behind them."""

    mixer: str
    mixer_config: dict[str, Any]
    values: dict[str, Any]
    grid: tuple[GridPoint, ...]
    seed: int
    mixer_code: str = ""
    seconds: float = 0.0
    #: the chosen value lies at an end of the grid that could not be extended further (a caveat, said on output)
    at_edge: bool = False

    @property
    def best(self) -> GridPoint:
        """The lowest validation loss; a diverged point (infinite) never wins over a finite one."""
        return min(self.grid, key=lambda p: (not math.isfinite(p.val_nll), p.val_nll))


@dataclass(frozen=True)
class SeedSpread:
    """How much the validation loss of one setting moves between training seeds, pooled over the mixers tuned
    (each at its chosen values): ``sd`` the pooled standard deviation on ``scale``, ``df`` its degrees of freedom,
    ``sd_upper`` its one-sided 95% upper confidence bound, which the board uses (docs/protocol.md, "Seeds")."""

    scale: str
    sd: float
    sd_upper: float
    df: int
    seeds: tuple[int, ...]
    splits: tuple[str, ...]
    per_mixer: dict[str, float] = field(default_factory=dict)


@dataclass
class RecipeBook:
    """The recipes of one preset: what was tuned, how, and the seed spread."""

    preset: str
    entries: dict[str, RecipeEntry] = field(default_factory=dict)
    objective: str = ""
    setting: dict[str, Any] = field(default_factory=dict)  # backbone, budget and data the grid was run at
    seed_spread: SeedSpread | None = None
    commit: str = ""
    written_at: str = ""
    source: str = ""  # the file it was read from (not written)

    # ------------------------------------------------------------------ lookup
    @staticmethod
    def key(mixer: str, mixer_config: dict[str, Any]) -> str:
        """One entry per mixer and full config: ``protot`` or ``protot {"n_prototypes": 4, ...}``."""
        from harness.registry import MIXERS
        from harness.config import to_dict

        entry = MIXERS.get(mixer)
        full = to_dict(entry.make_config(mixer_config))
        default = to_dict(entry.config_cls())
        return mixer if full == default else f"{mixer} {canonical_json(full)}"

    def lookup(self, mixer: str, mixer_config: dict[str, Any]) -> RecipeEntry | None:
        return self.entries.get(self.key(mixer, mixer_config))

    def add(self, entry: RecipeEntry) -> None:
        self.entries[self.key(entry.mixer, entry.mixer_config)] = entry

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RECIPE_SCHEMA, "preset": self.preset, "objective": self.objective, "setting": self.setting,
            "commit": self.commit, "written_at": self.written_at,
            "seed_spread": None if self.seed_spread is None else asdict(self.seed_spread),
            "mixers": {k: _finite(asdict(e)) for k, e in sorted(self.entries.items())},
        }

    @staticmethod
    def from_json(doc: Any, source: str = "") -> "RecipeBook":
        where = source or "recipe file"
        if not isinstance(doc, dict) or doc.get("schema") != RECIPE_SCHEMA:
            raise MixbenchError(f"{where} is not a schema-{RECIPE_SCHEMA} recipe file; regenerate it with "
                                "`mixbench tune`.")
        try:
            entries = {}
            for key, e in dict(doc.get("mixers") or {}).items():
                grid = tuple(GridPoint(dict(p["values"]), _loss(p["val_nll"]), _loss(p["low"]), _loss(p["high"]),
                                       float(p["seconds"])) for p in e["grid"])
                entries[key] = RecipeEntry(str(e["mixer"]), dict(e["mixer_config"]), dict(e["values"]), grid,
                                           int(e["seed"]), str(e.get("mixer_code", "")), float(e.get("seconds", 0)),
                                           bool(e.get("at_edge", False)))
            spread = doc.get("seed_spread")
            if spread is not None:
                spread = SeedSpread(str(spread["scale"]), float(spread["sd"]), float(spread["sd_upper"]),
                                    int(spread["df"]), tuple(int(s) for s in spread["seeds"]),
                                    tuple(str(s) for s in spread["splits"]),
                                    {str(k): float(v) for k, v in dict(spread.get("per_mixer") or {}).items()})
                if not (math.isfinite(spread.sd_upper) and spread.sd_upper >= spread.sd >= 0 and spread.df >= 1):
                    raise ValueError("seed_spread: sd and sd_upper must be finite, 0 <= sd <= sd_upper, df >= 1")
            return RecipeBook(str(doc["preset"]), entries, str(doc.get("objective", "")),
                              dict(doc.get("setting") or {}), spread, str(doc.get("commit", "")),
                              str(doc.get("written_at", "")), source)
        except (KeyError, TypeError, ValueError) as exc:
            raise MixbenchError(f"{where} is malformed ({type(exc).__name__}: {exc}); regenerate it with "
                                "`mixbench tune`.") from None

    def write(self, path: Path) -> None:
        from harness.store.storage import atomic_write

        atomic_write(path, (json.dumps(self.to_json(), indent=1) + "\n").encode(), durable=True)


def _finite(entry: dict[str, Any]) -> dict[str, Any]:
    """A diverged grid point's infinite loss as JSON null (JSON has no infinity)."""
    entry["grid"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in p.items()}
                     for p in entry["grid"]]
    return entry


def _loss(value: Any) -> float:
    return math.inf if value is None else float(value)


def read_book(path: Path) -> RecipeBook:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MixbenchError(f"cannot read the recipe file {path} ({type(exc).__name__}: {exc}).") from None
    return RecipeBook.from_json(doc, str(path))


def search_path(preset: str) -> list[Path]:
    """The recipe files of ``preset`` in the order they are consulted (see the module docstring)."""
    paths = []
    env = os.environ.get("MIXBENCH_RECIPES")
    if env:
        p = Path(env).expanduser()
        paths.append(p / f"{preset}.json" if p.is_dir() or not p.suffix else p)
    paths += [LOCAL / f"{preset}.json", SHIPPED / f"{preset}.json"]
    return paths


def load_books(preset: str) -> list[RecipeBook]:
    """Every existing recipe file of ``preset``, first-consulted first (a file for another preset is refused)."""
    books = []
    for path in search_path(preset):
        if path.is_file():
            book = read_book(path)
            if book.preset != preset:
                if path.name != f"{preset}.json":  # MIXBENCH_RECIPES naming one preset's file: not this preset's
                    continue
                raise ConfigError(f"{path} holds recipes for preset {book.preset}, not {preset}.")
            books.append(book)
    return books


#: backbone fields a recipe file's setting does not fix (the corpus sets the vocabulary, matching the MLP width)
_FREE_BACKBONE = ("vocab_size", "ffn_hidden")


def setting_differences(book: RecipeBook, backbone: dict[str, Any] | None) -> list[str]:
    """The backbone fields on which ``backbone`` differs from the setting the book was tuned at (a learning rate
    tuned with the mixer-branch gate is not one for a backbone without it)."""
    tuned = (book.setting or {}).get("backbone") or {}
    if backbone is None:
        return []
    return sorted(k for k, v in tuned.items() if k not in _FREE_BACKBONE and k in backbone
                  and not _same(backbone[k], v))


def find_recipe(preset: str, mixer: str, mixer_config: dict[str, Any],
                backbone: dict[str, Any] | None = None) -> tuple[RecipeEntry | None, str]:
    """The first recipe for this mixer config at ``preset`` tuned at this ``backbone`` (when given), and the file
    it came from."""
    for book in load_books(preset):
        entry = book.lookup(mixer, mixer_config)
        if entry is not None and not setting_differences(book, backbone):
            return entry, book.source
    return None, ""


def seed_spread(preset: str) -> SeedSpread | None:
    """The seed spread of ``preset``'s validation loss from its first recipe file that measured one."""
    for book in load_books(preset):
        if book.seed_spread is not None:
            return book.seed_spread
    return None


def recipe_status(preset: str, mixer: str, mixer_config: dict[str, Any], train: dict[str, Any],
                  backbone: dict[str, Any] | None = None) -> str:
    """``tuned`` when the training values equal this mixer config's recipe (tuned at this backbone), ``overridden``
    when a recipe exists but a value differs (an explicit ``--lr``), else ``untuned``."""
    entry, _ = find_recipe(preset, mixer, mixer_config, backbone)
    if entry is None:
        return UNTUNED
    same = all(_same(train.get(k), v) for k, v in entry.values.items())
    return TUNED if same else OVERRIDDEN


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b
