"""The layers of docs/ARCHITECTURE.md, checked by walking every import: the core names no suite or mixer, a plugin
imports only the API modules and the kit, a suite imports no other suite and no mixer, a mixer imports no suite."""

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
            if top in ("harness", "mixers", "suites", "reproductions") and not allowed(rel, name):
                out.append(f"{rel}:{line} imports {name}")
    return out


def test_the_core_imports_no_suite_and_no_mixer():
    assert _violations("harness", lambda rel, name: name.split(".")[0] == "harness") == []


#: the core's sub-packages in the order imports flow (docs/ARCHITECTURE.md, "The core's packages"): a module's
#: top-level imports reach only its own package and those before it; "" is harness/ itself (the public API:
#: errors, values, config, registry, mixer, suite, reproduction, stats, timing, recording). The CLI sits above
#: them all, and a function may import later packages lazily (the CLI's commands, a listing that loads its entry).
CORE_ORDER = ("", "store", "llm_judge", "corpus", "model", "hf", "reporting", "running")


def _core_layer(module: str) -> int:
    parts = module.split(".")
    return CORE_ORDER.index(parts[1]) if len(parts) > 2 and parts[1] in CORE_ORDER else 0


def test_the_core_packages_import_one_way():
    out = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        rel = path.relative_to(REPO)
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if module in ("harness", "harness.cli", "harness.cli_parser"):  # the package root sets threading up; the CLI
            # (its commands and its parser) uses every layer
            continue
        if len(rel.parts) == 3 and rel.parts[1] in CORE_ORDER:  # harness/<package>/<module>.py
            module_layer = CORE_ORDER.index(rel.parts[1])
        else:
            module_layer = _core_layer(module) if len(rel.parts) > 2 else 0
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:  # top-level imports only
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness."):
                if _core_layer(node.module) > module_layer:
                    out.append(f"{rel}:{node.lineno} imports {node.module}, a later layer")
    assert out == []
    packages = [p.name for p in (REPO / "harness").iterdir() if (p / "__init__.py").is_file()]
    assert sorted(packages) == sorted(CORE_ORDER[1:])
    for name in packages:  # each says its job in its first line
        doc = ast.get_docstring(ast.parse((REPO / "harness" / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and doc.splitlines()[0].endswith(".") and len(doc.splitlines()[0]) <= 120, name


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


#: the store's methods that write (harness/store/results.py); only the core calls them
STORE_WRITES = {"write_run", "write_file", "put_file", "delete", "remove_file"}


def test_only_the_core_writes_to_the_store():
    """Suites read the store and return typed results (their cross-run runs as ``AggregateRun``s): no suite
    module calls a writing method of a store (harness.running.evaluate.evaluate / store_runs are the one write path)."""
    calls = []
    for path in sorted((REPO / "suites").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_WRITES:
                owner = node.func.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if "store" in name.lower():
                    calls.append(f"{path.relative_to(REPO)}:{node.lineno} {name}.{node.func.attr}")
    assert calls == []


def test_a_reproduction_target_imports_no_suite_and_no_mixer():
    """Targets name suites and mixers by their registered names (docs/reproductions.md): a target that imported
    a suite's internals would break when the suite is reshaped, and would load it before the registry does."""
    assert _violations("reproductions", lambda rel, name: name.split(".")[0] in ("harness", "reproductions")) == []


#: the plugin API (docs/ARCHITECTURE.md, "Layers and imports"): the only core modules a suite, mixer or
#: reproduction target imports; what else it needs from the core is a name in the kit (harness/kit.py)
PLUGIN_API = {
    "harness", "harness.errors", "harness.registry", "harness.suite", "harness.mixer", "harness.values",
    "harness.config", "harness.stats", "harness.reproduction", "harness.recording", "harness.timing", "harness.kit",
}


def _outside_the_api(root: Path) -> list[str]:
    """``file:line imports module`` for every import (module-level or in a function) of a core module outside
    :data:`PLUGIN_API` in the Python files under ``root``."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for line, name in _imports(path):
            if name.split(".")[0] == "harness" and name not in PLUGIN_API:
                out.append(f"{path.relative_to(root.parent)}:{line} imports {name}")
    return out


def test_plugins_import_only_the_api_and_the_kit(tmp_path):
    packages = ("suites", "mixers", "reproductions", "examples")  # the worked examples are what plugin authors copy
    assert [v for package in packages for v in _outside_the_api(REPO / package)] == []
    planted = tmp_path / "suites" / "planted"
    planted.mkdir(parents=True)
    (planted / "suite.py").write_text("from harness.kit import window_nll\n\n\ndef run():\n"
                                      "    import harness.store.results\n"
                                      "    from harness.running.runner import run_requests\n")
    assert _outside_the_api(tmp_path / "suites") == ["suites/planted/suite.py:5 imports harness.store.results",
                                                      "suites/planted/suite.py:6 imports harness.running.runner"]


def test_every_kit_name_resolves_and_the_kit_loads_lazily():
    """Each name of ``harness.kit.__all__`` is the object of the core module the kit maps it to; importing the kit
    (in a fresh interpreter, after ``harness``) loads nothing else: no torch, none of those modules."""
    import importlib
    import subprocess
    import sys

    import harness.kit as kit

    assert len(set(kit.__all__)) == len(kit.__all__) and set(kit.__all__) == set(kit._HOME)
    for name in kit.__all__:
        assert getattr(kit, name) is getattr(importlib.import_module(kit._HOME[name]), name), name
    code = "import sys, harness\nbefore = set(sys.modules)\nimport harness.kit\nprint(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "['harness.kit']", out.stdout + out.stderr


def _calls_by_function(path: Path, attrs: set[str]) -> list[tuple[str, int, str]]:
    """(enclosing top-level function, line, attribute) of every call ``x.<attr>(...)`` in ``path`` (a class calling
    its own method is not counted)."""
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for top in tree.body:
        for node in ast.walk(top):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in attrs
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self")):
                out.append((getattr(top, "name", "<module>"), node.lineno, node.func.attr))
    return out


def test_every_run_is_made_and_written_by_the_one_scoring_function():
    """Every route (a checkpoint, a mixer definition, an external model, a grid, reproduce) makes its run through
    harness.running.evaluate.score_run: it is the only caller of a suite's ``run``/``run_mixer`` and, with
    ``store_runs`` (a suite's cross-run records), the only writer of runs."""
    makers, writers = [], []
    for package in ("harness", "suites", "mixers", "reproductions"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            for function, line, attr in _calls_by_function(path, {"run_mixer", "write_run"}):
                (writers if attr == "write_run" else makers).append((rel, function))
            tree = ast.parse(path.read_text(encoding="utf-8"), rel)
            for top in tree.body:  # suite.run(model, ctx): a call of .run with a SuiteContext-named second argument
                for node in ast.walk(top):
                    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
                            and len(node.args) == 2 and isinstance(node.args[1], ast.Name)
                            and node.args[1].id == "ctx"):
                        makers.append((rel, getattr(top, "name", "<module>")))
    assert sorted(set(makers)) == [("harness/running/evaluate.py", "score_run")], makers
    assert sorted(set(writers)) == [("harness/running/evaluate.py", "score_run"),
                                    ("harness/running/evaluate.py", "store_runs")], writers


def test_registries_refuse_a_class_of_the_wrong_kind_and_discover_their_packages():
    """A suite registered as a mixer (or any class that is not a Mixer, Suite or Target) is refused at
    registration, before it can be listed; the built-in packages list nothing by hand: every family folder,
    suite module and target module is found."""
    import pytest

    from harness.errors import MixbenchError
    from harness.registry import MIXERS, SUITES, TARGETS, register_mixer, register_suite, register_target
    from harness.suite import Suite

    for register, cls in ((register_mixer, Suite), (register_suite, object), (register_target, Suite)):
        with pytest.raises(TypeError, match="must subclass"):
            register("_wrong_kind")(type("Wrong", (cls,), {}))
    for registry in (MIXERS, SUITES, TARGETS):
        with pytest.raises(MixbenchError):
            registry.get("_wrong_kind")
    for package, registry in (("mixers", MIXERS), ("suites", SUITES), ("reproductions", TARGETS)):
        assert ast.get_docstring(ast.parse((REPO / package / "__init__.py").read_text())) is not None
        assert not [n for n in ast.parse((REPO / package / "__init__.py").read_text()).body
                    if isinstance(n, (ast.Import, ast.ImportFrom))], f"{package}/__init__.py imports by hand"
        sources = {e.source.split(".")[1] for e in registry.entries() if e.source.startswith(package + ".")}
        public = {p.name.removesuffix(".py") for p in (REPO / package).iterdir()
                  if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").is_file())}
        assert sources <= public and len(sources) >= 7, (package, sources)
