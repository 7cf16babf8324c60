"""The layers of docs/ARCHITECTURE.md, checked by walking every import: the core names no suite or mixer, a suite
imports no other suite and no mixer, a mixer imports no suite."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _violations(package: str, allowed) -> list[str]:
    out = []
    for path in sorted((REPO / package).rglob("*.py")):
        rel = path.relative_to(REPO)
        for line, name in _imports(path):
            top = name.split(".")[0]
            if top in ("harness", "mixers", "suites") and not allowed(rel, name):
                out.append(f"{rel}:{line} imports {name}")
    return out


def test_the_core_imports_no_suite_and_no_mixer():
    assert _violations("harness", lambda rel, name: name.split(".")[0] == "harness") == []


def test_a_suite_imports_only_the_core_and_itself():
    def allowed(rel: Path, name: str) -> bool:
        parts = name.split(".")
        if parts[0] == "harness":
            return True
        own = rel.parts[1].removesuffix(".py")  # suites/<own>/... or suites/<own>.py
        return parts[0] == "suites" and len(parts) > 1 and parts[1] == own

    assert _violations("suites", allowed) == []


def test_a_mixer_imports_no_suite():
    assert _violations("mixers", lambda rel, name: name.split(".")[0] in ("harness", "mixers")) == []


#: the store's methods that write (harness/results.py); only the core calls them
STORE_WRITES = {"write_run", "write_file", "put_file", "delete", "remove_file"}


def test_only_the_core_writes_to_the_store():
    """Suites read the store and return typed results (their cross-run runs as ``AggregateRun``s): no suite
    module calls a writing method of a store (harness.evaluate.evaluate / store_runs are the one write path)."""
    calls = []
    for path in sorted((REPO / "suites").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_WRITES:
                owner = node.func.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if "store" in name.lower():
                    calls.append(f"{path.relative_to(REPO)}:{node.lineno} {name}.{node.func.attr}")
    assert calls == []
