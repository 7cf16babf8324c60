"""The GPU check's plumbing on a CPU: the shell script parses, its Python parts run at tiny sizes, the summary reads
what they wrote (benchmarks/gpu_check.sh runs them on a GPU)."""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # how the scripts see each other when run as files
    return {name: importlib.import_module(name) for name in ("gpu_parity", "gpu_throughput", "gpu_report")}


def test_shell_script_parses():
    assert subprocess.run(["bash", "-n", str(BENCHMARKS / "gpu_check.sh")]).returncode == 0


def test_crossover_is_the_length_from_which_the_mixer_stays_faster(scripts):
    def point(t, ratio):
        return {"length": t, "mode": "prefill", "cells": {"protot": {"ratio": ratio}, "attention": {}}}

    cross = scripts["gpu_throughput"].crossovers
    ratios = {1024: 1.2, 2048: 0.9, 4096: 1.1, 8192: 0.8, 16384: 0.7}
    assert cross([point(t, r) for t, r in ratios.items()], ["protot", "attention"])["protot"]["prefill"] == "8192"
    assert cross([point(t, 0.5) for t in ratios], ["protot", "attention"])["protot"]["prefill"] == "1024"
    assert cross([point(t, r) for t, r in {**ratios, 16384: 1.01}.items()], ["protot"])["protot"]["prefill"] == "never"
    assert cross([], ["protot"])["protot"]["train"] == "-"


def test_parts_write_what_the_summary_reads(scripts, tmp_path):
    assert scripts["gpu_parity"].main(["--device", "cpu", "--mixers", "protot", "--seq-len", "16",
                                       "--json", str(tmp_path / "parity.json")]) == 0
    rows = json.loads((tmp_path / "parity.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["fp32", "bf16", "decode"] and all(r["passed"] for r in rows)

    assert scripts["gpu_throughput"].main(["--device", "cpu", "--preset", "tiny", "--mixers", "protot,attention",
                                           "--lengths", "16", "--modes", "prefill,decode", "--repeats", "2",
                                           "--kernel-length", "64", "--json", str(tmp_path / "throughput.json")]) == 0
    report = json.loads((tmp_path / "throughput.json").read_text())
    cells = {p["mode"]: p["cells"] for p in report["points"]}
    assert set(cells) == {"prefill", "decode"} and cells["prefill"]["protot"]["tokens_per_s"] > 0
    assert "ratio" in cells["prefill"]["protot"] and "ratio" not in cells["prefill"]["attention"]
    assert 0 < report["kernel"]["fraction"] and report["kernel"]["label"] == "chunked forward+backward"

    (tmp_path / "status").write_text("env 0 3\nparity 0 20\ncuda-tests 1 4\nthroughput 124 170\n")
    text = scripts["gpu_report"].summary(tmp_path)
    assert "TIMED OUT" in text and "FAILED (exit 1)" in text
    assert "protot          chunked      decode" in text and "3/3 comparisons within tolerance" in text
    assert "CUDA tests: no report" in text  # no pytest.xml: said so, the rest still printed
    assert "    16 prefill" in text and "crossover protot:" in text
