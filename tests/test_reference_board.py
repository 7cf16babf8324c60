"""The committed reference board (results/reference/) parses under the current board schema and covers the
quickstart's mixers and suites: a format change cannot leave it stale unnoticed."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.running.quickstart import quickstart_mixers, quickstart_suites
from harness.registry import control_mixers
from harness.reporting.board_document import validate_board_document

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference"


def test_reference_board_parses_and_covers_the_quickstart():
    doc = json.loads((REFERENCE / "board.json").read_text(encoding="utf-8"))
    validate_board_document(doc)
    # the quickstart's mixers and what `make reference-board` adds (REF_ADD: a hybrid beside its parts)
    added = re.search(r"^REF_ADD := (.*)$", (REFERENCE.parents[1] / "Makefile").read_text(), re.M).group(1).split(",")
    assert {r["mixer"] for r in doc["rows"] if not r["control"]} == {*quickstart_mixers(), *added}
    assert {r["mixer"] for r in doc["rows"] if r["control"]} == set(control_mixers())  # trained beside them
    assert {c["suite"] for c in doc["columns"]} == set(quickstart_suites())
    for row in doc["rows"]:
        assert row["gate"] == "passed" and row["provenance"]["revision"], row["model"]
    md = (REFERENCE / "board.md").read_text(encoding="utf-8")
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(doc["rows"]) and max(map(len, table)) <= 120
