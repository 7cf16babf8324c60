"""``mixbench tune``: each mixer's training values chosen on validation, into its preset's recipe file
(docs/protocol.md, "Tuned per mixer"; harness/model/recipes.py).

For every mixer (the controls included) and every point of a small grid (by default the learning rate at 1, 2, 4
and 8 x 10^-3), a model is trained at the preset's budget and matched size with seed 0 and scored by its NLL per
token on every window of the validation split; the point with the lowest loss is the mixer's recipe. A best point
at an end of a numeric grid is not trusted: the grid is extended past it (x2 or /2) until the best lies inside or
``extend`` steps are spent, and an end that is still best is recorded as such. Then, with ``seeds`` > 1, the
chosen values are trained again at seeds 1 .. seeds-1 and the spread of the validation loss between seeds
(in-domain and out-of-domain, the larger) is pooled over the mixers: the preset's seed spread, with which the board
tells a difference from training noise when a row has one seed (docs/protocol.md, "Seeds").

Everything here runs inside :func:`harness.corpus.protocol.selection`: a test split cannot be read. Checkpoints are
kept in the results store's checkpoint folder under their model identity, so a tuned model (seed 0 at its chosen
values) is the very checkpoint a later grid at that recipe scores, and a rerun trains nothing it already has.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from harness import stats
from harness.config import RunSpec, TrainConfig, to_dict
from harness.corpus.protocol import check_read, selection
from harness.errors import ConfigError, MixbenchError, NonFiniteLossError
from harness.model.recipes import NLL_SCALE, GridPoint, RecipeBook, RecipeEntry, SeedSpread, read_book
from harness.store.results import ResultsStore

#: the default grid: learning rates a factor of 2 apart around the presets' 3e-3
DEFAULT_GRID = {"lr": (1e-3, 2e-3, 4e-3, 8e-3)}
#: held-out splits of the objective and of the seed spread (never a test split)
OBJECTIVE_SPLIT = "validation"
SPREAD_SPLITS = ("validation", "validation_ood")


@dataclass(frozen=True)
class TuneRequest:
    """What to tune: mixers at a preset (with the grid's overrides), the grid, seeds for the spread, where to write."""

    preset: str
    mixers: tuple[str, ...]
    grid: dict[str, tuple[Any, ...]] = field(default_factory=lambda: dict(DEFAULT_GRID))
    seeds: int = 3
    extend: int = 2
    out: Path = Path("recipes")
    mixer_configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    backbone_overrides: dict[str, Any] = field(default_factory=dict)
    train_overrides: dict[str, Any] = field(default_factory=dict)
    data_overrides: dict[str, Any] = field(default_factory=dict)
    match: str | None = None
    device: str = "cpu"
    progress: bool = True
    skip_gate: bool = False
    yes: bool = False  # train models estimated past the time limit (harness.running.training_time)
    #: the held-out split the objective reads (a test split is refused: docs/protocol.md, "Splits")
    split: str = OBJECTIVE_SPLIT

    def __post_init__(self) -> None:
        from harness.corpus.data import SPLITS

        if self.split not in SPLITS:
            raise ConfigError(f"tune: split must be one of {', '.join(SPLITS)}, got {self.split!r}.")
        if not self.mixers:
            raise ConfigError("tune: name at least one mixer.")
        if not self.grid or any(not values for values in self.grid.values()):
            raise ConfigError("tune: the grid needs at least one field with at least one value.")
        names = {f for f in TrainConfig.__dataclass_fields__}
        bad = sorted(set(self.grid) - names)
        if bad:
            raise ConfigError(f"tune: the grid names unknown training option(s) {', '.join(bad)}; it tunes "
                              f"training values ({', '.join(sorted(names - {'seed'}))}).")
        if "seed" in self.grid or "seed" in self.train_overrides:
            raise ConfigError("tune: seeds are not tuned; --seeds sets how many measure the spread.")
        if not 1 <= self.seeds <= 16:
            raise ConfigError(f"tune: seeds must be from 1 to 16, got {self.seeds}.")
        if not 0 <= self.extend <= 4:
            raise ConfigError(f"tune: extend must be from 0 to 4, got {self.extend}.")
        clash = sorted(set(self.grid) & set(self.train_overrides))
        if clash:
            raise ConfigError(f"tune: {', '.join(clash)} is both tuned and fixed; give it in one place.")


@dataclass
class TuneReport:
    book: RecipeBook
    path: Path
    trainings: int
    seconds: float

    def render(self) -> str:
        lines = [f"recipes for preset {self.book.preset} written to {self.path} ({self.trainings} trainings, "
                 f"{self.seconds / 60:.1f} min):"]
        lines.append("| mixer | grid: validation NLL/token [95% CI] | chosen | seconds |")
        lines.append("|---|---|---|---:|")
        for key, e in sorted(self.book.entries.items()):
            grid = "; ".join(f"{_values_text(p.values)}: {p.val_nll:.4f} [{p.low:.4f}, {p.high:.4f}]"
                             for p in sorted(e.grid, key=lambda p: sorted(p.values.items())))
            edge = " (at the grid's end)" if e.at_edge else ""
            lines.append(f"| {key} | {grid} | {_values_text(e.values)}{edge} | {e.seconds:.0f} |")
        s = self.book.seed_spread
        if s is not None:
            lines.append(f"seed spread ({len(s.seeds)} seeds, {', '.join(s.splits)}): pooled SD {s.sd:.4f} {s.scale} "
                         f"(df {s.df}; 95% upper bound {s.sd_upper:.4f}, what the board uses)")
        return "\n".join(lines)


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(values.items()))


def grid_points(grid: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The cartesian product of the grid, in a fixed order."""
    names = sorted(grid)
    return [dict(zip(names, combo)) for combo in itertools.product(*(grid[n] for n in names))]


def extension(grid: dict[str, tuple[Any, ...]], best: dict[str, Any]) -> dict[str, Any] | None:
    """Values one step past the grid's end where the best point sits at that end of a numeric field with several
    values (the step is the ratio of the last two values, or their difference when a value is <= 0), the other
    fields at the best's values; None when the best is inside on every field."""
    for name in sorted(grid):
        values = sorted(grid[name])
        if len(values) < 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            continue
        value = best[name]
        for end, inner in ((values[-1], values[-2]), (values[0], values[1])):
            if value == end:
                if end > 0 and inner > 0:
                    new = end * (end / inner)
                else:
                    new = end + (end - inner)
                new = type(end)(new) if isinstance(end, int) else float(f"{new:.6g}")
                return {**best, name: new}
    return None


def tune(req: TuneRequest, store: ResultsStore) -> TuneReport:
    """Run the search of ``req`` (see the module docstring) and write the recipe file after every mixer, so an
    interrupted search keeps what it finished (and its checkpoints: a rerun trains only what is missing)."""
    t_start = time.perf_counter()
    with selection(f"mixbench tune (preset {req.preset})"):
        check_read(req.split)  # a test split is refused before anything is trained
    from harness.running.training_time import check_training_time, training_label

    for mixer in req.mixers:  # every value and name (and each model's training time) is checked before any work
        for point in grid_points(req.grid):
            spec = _spec(req, mixer, point, 0)
            check_training_time(spec, req.device, req.yes, f"tuning: {training_label(spec)}")
    path = _out_path(req)
    book = _existing_book(req)
    _probe_writable(path)  # an unwritable --out fails now, not after hours
    trainer = _Trainer(req, store)
    entries: list[RecipeEntry] = []
    with selection(f"mixbench tune (preset {req.preset})"):
        for mixer in req.mixers:
            entries.append(_tune_mixer(req, mixer, trainer))
            book.add(entries[-1])
            _write_book(req, book, path)
        if req.seeds > 1:
            spread = _seed_spread(req, entries, trainer)
            # a smaller search (one new mixer) does not replace a spread measured over more models
            if book.seed_spread is None or spread.df >= book.seed_spread.df:
                book.seed_spread = spread
            _write_book(req, book, path)
    return TuneReport(book, path, trainer.trainings, time.perf_counter() - t_start)


def _write_book(req: TuneRequest, book: RecipeBook, path: Path) -> None:
    """The recipe file with what the search was: its objective, the setting it ran at, the commit."""
    from harness.store.provenance import provenance

    book.objective = (f"NLL per token (nats) on every window of the '{req.split}' split at the model's "
                      f"context; seed 0; lowest point estimate wins")
    book.setting = {**_setting(req), "grid": {k: list(v) for k, v in req.grid.items()}}
    book.commit = str(((provenance().get("git") or {}).get("commit")) or "")
    book.written_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    book.write(path)


def _setting(req: TuneRequest) -> dict[str, Any]:
    """What the recipes are tuned at: the backbone (less what the corpus and matching set), the training values
    the grid does not vary, the data and the matching rule."""
    from harness.model.specs import make_run_spec

    spec = make_run_spec(req.mixers[0], req.preset, req.mixer_configs.get(req.mixers[0]), req.backbone_overrides,
                         req.train_overrides, req.data_overrides, match=req.match, recipes=False)
    return {"backbone": {k: v for k, v in to_dict(spec.model.backbone).items()
                         if k not in ("vocab_size", "ffn_hidden")},
            "train": {k: v for k, v in to_dict(spec.train).items() if k not in ("seed", *req.grid)},
            "data": to_dict(spec.data), "match": req.match or "preset"}


def _probe_writable(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.parent / f".{path.name}.probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise MixbenchError(f"cannot write the recipe file {path} ({exc.strerror or exc}); choose another --out."
                            ) from None


def _out_path(req: TuneRequest) -> Path:
    out = Path(req.out).expanduser()
    return out if out.suffix == ".json" else out / f"{req.preset}.json"


def _existing_book(req: TuneRequest) -> RecipeBook:
    """The recipe file being extended: its other mixers stay, the ones tuned now are replaced."""
    path = _out_path(req)
    if not path.exists():
        return RecipeBook(req.preset)
    book = read_book(path)
    if book.preset != req.preset:
        raise MixbenchError(f"{path} holds recipes for preset {book.preset}, not {req.preset}; choose another --out.")
    now = _setting(req)
    changed = sorted(f"{part}.{k}" for part in ("backbone", "train", "data")
                     for k in set(now[part]) | set((book.setting or {}).get(part) or {})
                     if (book.setting or {}).get(part, {}).get(k) != now[part].get(k))
    if book.setting and (changed or book.setting.get("match") != now["match"]):
        shown = ", ".join(changed[:4]) or "match"
        raise MixbenchError(f"{path} holds recipes tuned at another setting ({shown} differ); one file is one "
                            "setting: choose another --out.")
    return book


def _spec(req: TuneRequest, mixer: str, values: dict[str, Any], seed: int) -> RunSpec:
    from harness.model.specs import make_run_spec

    return make_run_spec(mixer, req.preset, req.mixer_configs.get(mixer), req.backbone_overrides,
                         {**req.train_overrides, **values, "seed": seed}, req.data_overrides, match=req.match,
                         recipes=False)


class _Trainer:
    """Trains (or finds) one checkpoint per spec in the store's checkpoint folder and scores it on held-out data."""

    def __init__(self, req: TuneRequest, store: ResultsStore):
        self.req, self.store = req, store
        self.trainings = 0
        self.gated: set[str] = set()

    def loss(self, spec: RunSpec, split: str = OBJECTIVE_SPLIT) -> tuple[float, float, float, float]:
        """``(NLL per token, interval low, high, seconds)`` on every window of ``split``: token-weighted over
        documents, the interval a percentile bootstrap over documents; the seconds of training and scoring."""
        from harness.model.checkpoint import load_model
        from harness.model.gate import require_gate
        from harness.model.specs import bind_vocab
        from harness.model.window_nll import document_nll
        from harness.running.corpora import corpus_for
        from harness.running.runner import checkpoint_root
        from harness.running.training import train
        from harness.store.identity import model_identity

        corpus = corpus_for(spec.data, self.req.progress)
        spec = bind_vocab(spec, corpus.tokenizer.vocab_size)
        if spec.model.mixer not in self.gated:
            require_gate(spec.model, self.req.preset, self.req.device, self.req.skip_gate, progress=self.req.progress)
            self.gated.add(spec.model.mixer)
        folder = checkpoint_root(self.store) / model_identity(spec, corpus.fingerprint).id
        result = train(spec, folder, corpus, device=self.req.device, progress=self.req.progress)
        self.trainings += 0 if result.skipped else 1
        t0 = time.perf_counter()
        model, _ = load_model(folder, self.req.device)
        docs = corpus.encode_split(split)
        windows = corpus.eval_windows(split, model.config.context)
        nll, tokens = document_nll(model, windows, len(docs), 8, corpus.tokenizer.pad_id)
        keep = tokens > 0
        res = stats.bootstrap((nll[keep], tokens[keep]),
                              lambda a, b, axis=-1: np.sum(a, axis=axis) / np.sum(b, axis=axis),
                              n_resamples=1000, seed=0)
        low, high = (res.interval.low, res.interval.high) if res.interval is not None else (res.point, res.point)
        # the cost of the point: its training (recorded with the checkpoint when it was found, not trained) and
        # its scoring
        return res.point, low, high, result.seconds + time.perf_counter() - t0


def _tune_mixer(req: TuneRequest, mixer: str, trainer: _Trainer) -> RecipeEntry:
    """The grid (extended past a best end point) for one mixer, and its chosen values."""
    from harness.registry import MIXERS
    from harness.store.identity import plugin_fingerprint

    grid = {k: tuple(v) for k, v in req.grid.items()}
    todo = grid_points(grid)
    points: dict[str, GridPoint] = {}
    extended = 0
    while True:
        for values in todo:
            key = _values_text(values)
            if key in points:
                continue
            try:
                loss, low, high, seconds = trainer.loss(_spec(req, mixer, values, 0), req.split)
                shown = f"{loss:.4f} [{low:.4f}, {high:.4f}]"
            except NonFiniteLossError:  # a diverging value is a result (too large), not the end of the search
                loss, low, high, seconds, shown = math.inf, math.inf, math.inf, 0.0, "diverged"
            points[key] = GridPoint(values, loss, low, high, round(seconds, 1))
            # one line per point whatever --no-progress says: these are results, not a progress bar
            print(f"[tune] {mixer} {key}: validation NLL {shown} ({seconds:.0f} s)", file=sys.stderr, flush=True)
        best = RecipeEntry(mixer, {}, {}, tuple(points.values()), 0).best
        if not math.isfinite(best.val_nll):
            raise MixbenchError(f"every grid point of {mixer} diverged ({', '.join(points)}); try smaller values.")
        beyond = extension(grid, best.values)
        if beyond is not None:
            try:  # one step past the end may leave the field's range (a negative warmup, a zero batch)
                _spec(req, mixer, beyond, 0)
            except ConfigError:
                beyond = None
        if beyond is None or extended >= req.extend:
            break
        extended += 1
        for name, value in beyond.items():
            if value not in grid[name]:
                grid[name] = tuple(sorted((*grid[name], value)))
        todo = [beyond]
    config = to_dict(MIXERS.get(mixer).make_config(req.mixer_configs.get(mixer) or {}))
    return RecipeEntry(mixer, config, dict(best.values), tuple(points.values()), 0,
                       plugin_fingerprint(MIXERS.get(mixer).cls), round(sum(p.seconds for p in points.values()), 1),
                       at_edge=extension(grid, best.values) is not None)


def _seed_spread(req: TuneRequest, entries: list[RecipeEntry], trainer: _Trainer) -> SeedSpread:
    """Each mixer's chosen values at every seed, scored on both validation splits; the pooled standard deviation
    between seeds of the split where it is larger, with its chi-square upper bound (one-sided 95%)."""
    seeds = tuple(range(req.seeds))
    pooled: dict[str, stats.PooledSD] = {}
    per_mixer: dict[str, float] = {}
    for split in SPREAD_SPLITS:
        groups = []
        for e in entries:
            losses = [trainer.loss(_spec(req, e.mixer, e.values, seed), split)[0] for seed in seeds]
            print(f"[tune] {e.mixer} seeds {list(seeds)} on {split}: " + ", ".join(f"{x:.4f}" for x in losses),
                  file=sys.stderr, flush=True)
            per_mixer[f"{e.mixer}/{split}"] = round(float(np.std(losses, ddof=1)), 6)
            groups.append(losses)
        found = stats.pooled_sd(groups)
        if found is None:
            raise MixbenchError(f"the seeds of {', '.join(e.mixer for e in entries)} gave no finite spread on {split}.")
        pooled[split] = found
    split = max(pooled, key=lambda s: pooled[s].estimate)
    found = pooled[split]
    return SeedSpread(NLL_SCALE, round(found.estimate, 6), round(found.upper, 6), found.df, seeds, (split,),
                      per_mixer)


def run_sweep(plan, store, device: str, progress: bool, skip_gate: bool = False, yes: bool = False) -> None:
    """A plan's ``sweep:``: tune its mixers (controls included) at each preset on validation, with the plan's own
    overrides, into recipes/<preset>.json, which the grid then trains with (docs/protocol.md)."""
    if not plan.sweep:
        return
    if plan.ladder:
        raise ConfigError(f"plan {plan.name}: sweep and ladder together would tune one rung for all; tune each rung's "
                          "setting with `mixbench tune` instead.")
    for preset in plan.presets:
        req = TuneRequest(preset, tuple(plan.all_mixers), dict(plan.sweep), seeds=1,
                          mixer_configs={m: dict(c) for m, c in plan.mixer_configs.items()},
                          backbone_overrides=dict(plan.backbone), train_overrides=dict(plan.train),
                          data_overrides=dict(plan.data), match=plan.match, device=device, progress=progress,
                          skip_gate=skip_gate, yes=yes)
        print(tune(req, store).render())
