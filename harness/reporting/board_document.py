"""The board as a JSON document (``board.json``, ``mixbench leaderboard --format json``, the site's data): every
row with its identity, cost, rank and cells, the notes, and a schema a committed reference board is checked
against (docs/ARCHITECTURE.md, "The board")."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from harness.reporting.legend import legend
from harness.reporting.preamble import preamble
from harness.reporting.table import Column, Row
from harness.store.results import json_safe

if TYPE_CHECKING:
    from harness.reporting.board import Board

#: version of the JSON board document
BOARD_SCHEMA = 1


def board_records(board: Board, columns: list[Column] | None = None) -> list[dict[str, Any]]:
    """JSON-ready rows: identity, cost, rank with interval, and every cell with its interval, group and vote."""
    table = board.table
    columns = list(table.columns) if columns is None else columns
    out = []
    for row in table.rows:
        rec: dict[str, Any] = {
            "row": row.key, "model": row.label, "mixer": row.mixer, "control": row.control, "external": row.external,
            "preset": row.preset,
            "seeds": list(row.seeds),
            "parameters": row.parameters, "state_floats": row.state_floats, "train_flops": row.train_flops,
            "train_flops_estimated": row.train_flops_estimated,
            "train_tokens_per_s": row.train_tokens_per_s, "gate": row.gate, "recipe": row.recipe,
            "non_embedding_parameters": row.non_embedding_parameters, "residual_gates": row.residual_gates,
            "output_init": row.output_init, "train_tokens": row.budget,
            "rank": board.rank.get(row.key), "rank_interval": board.rank_interval.get(row.key),
            "rank_tied": board.tied.get(row.key, False), "borda_points": board.points.get(row.key),
            "unranked": board.unranked.get(row.key), "pareto": board.pareto.get(row.key),
            "provenance": row_provenance(row), "runs": row_runs(row), "cells": {},
        }
        for c in columns:
            cell = table.cell(row, c)
            if cell is None:
                continue
            verdict = board.verdicts.get(c.name)
            rec["cells"][c.name] = {**cell.to_json(), "role": c.role, "votes": bool(verdict and verdict.votes),
                                    "group": board.group(row, c) if verdict is not None and verdict.votes else None,
                                    "not_better_than_control": (row.key, c.name) in board.not_above_control,
                                    "not_better_than_null": (row.key, c.name) in board.not_above_null,
                                    "vs_controls": [comp.to_json()
                                                    for comp in board.vs_controls.get((row.key, c.name), [])]}
        out.append(rec)
    return out


def row_runs(row: Row) -> dict[str, list[str]]:
    """Every run id of the row (all seeds), per suite, oldest first: what `mixbench show` and `compare` take."""
    out: dict[str, list[str]] = {}
    for run in sorted(row.runs, key=lambda r: (r.manifest.written_at, r.run_id)):
        out.setdefault(run.manifest.suite, []).append(run.run_id)
    return dict(sorted(out.items()))


def row_provenance(row: Row) -> dict[str, Any]:
    """Where a row's numbers come from: code revision, fingerprints, machine and threading of its newest run."""
    if not row.runs:
        return {}
    newest = max(row.runs, key=lambda r: r.manifest.written_at)
    m = newest.manifest
    prov = m.provenance or {}
    git = prov.get("git") or {}
    hw = prov.get("hardware") or {}
    subject_parts = m.identity.get("subject_parts") or {}
    mixer_parts = subject_parts.get("mixer")
    if not isinstance(mixer_parts, dict):  # a mixer-scoped run: its subject is the mixer's identity itself
        mixer_parts = subject_parts
    return {
        "revision": git.get("commit"), "dirty": git.get("dirty"), "mixbench": prov.get("mixbench"),
        "mixer_code": mixer_parts.get("mixer_code"), "core_code": subject_parts.get("core_code"),
        "packages": subject_parts.get("packages"), "cpu": hw.get("cpu"), "threads": hw.get("torch_threads"),
        "device": m.subject.device, "threading": (m.identity.get("device") or {}).get("policy"),
        "newest_run": newest.run_id, "written_at": m.written_at,
    }


def board_json(board: Board, columns: list[Column] | None = None) -> str:
    doc = {
        "schema": BOARD_SCHEMA,
        "columns": [{"name": c.name, "suite": c.suite, "metric": c.metric, "role": c.role, "config": c.config,
                     "higher_is_better": c.higher_is_better, "unit": c.unit,
                     "votes": board.verdicts[c.name].votes, "weight": board.verdicts[c.name].weight,
                     "not_voting_because": board.verdicts[c.name].reason or None}
                    for c in (board.table.columns if columns is None else columns)],
        "rows": board_records(board, columns),
        "notes": legend(board, list(board.table.columns) if columns is None else columns),
        "headline": board.headline(),
        "preamble": preamble(board),
        "context_use": [u.to_json() for u in board.context],
        "seed_noise": {f"{p}/{name}": None if n is None else n.to_json()
                       for (p, name), n in sorted(board.seed_noise.items())},
        "reference_controls": board.reference_controls,
        "config": {"alpha": board.config.alpha, "rank_level": board.config.rank_level,
                   "bootstrap": board.config.bootstrap},
    }
    names = {c.name for c in (board.table.columns if columns is None else columns)}
    stability = [s.to_json() for s in board.stability if s.column in names and s.status != "only one budget"]
    if stability:  # only where a setting was trained at several token budgets (docs/rank_stability.md)
        doc["rank_stability"] = stability
        for c in doc["columns"]:
            c["ordering_changed"] = c["name"] in board.unsettled
    return json.dumps(json_safe(doc), allow_nan=False, ensure_ascii=False, indent=2)


def validate_board_document(doc: Any) -> None:
    """Raise ValueError naming what does not fit the board JSON schema (a committed reference board is read back
    by a test, so a format change cannot leave it stale unnoticed)."""
    if not isinstance(doc, dict) or doc.get("schema") != BOARD_SCHEMA:
        raise ValueError(f"not a schema-{BOARD_SCHEMA} board document")
    for key, kind in (("columns", list), ("rows", list), ("notes", list), ("config", dict)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"board document: '{key}' must be a {kind.__name__}")
    names = set()
    for c in doc["columns"]:
        missing = {"name", "suite", "metric", "role", "votes", "higher_is_better"} - set(c)
        if missing:
            raise ValueError(f"board column lacks {sorted(missing)}")
        names.add(c["name"])
    for r in doc["rows"]:
        missing = {"row", "model", "mixer", "preset", "gate", "rank", "rank_interval", "provenance", "cells"} - set(r)
        if missing:
            raise ValueError(f"board row {r.get('model')!r} lacks {sorted(missing)}")
        for name, cell in r["cells"].items():
            if name not in names:
                raise ValueError(f"board row {r['model']!r} has a cell in unknown column {name!r}")
            if not {"value", "interval", "group", "votes", "role"} <= set(cell):
                raise ValueError(f"board cell {r['model']!r}/{name} is incomplete")
