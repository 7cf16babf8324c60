"""The GPU check's plumbing on a CPU: the shell script parses, its Python parts run at tiny sizes, the summary reads
what they wrote (benchmarks/gpu_check.sh runs them on a GPU)."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # how the scripts see each other when run as files
    return {name: importlib.import_module(name) for name in ("gpu_parity", "gpu_throughput", "gpu_train", "gpu_report")}


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
                                           "--lengths", "16", "--modes", "prefill,train,decode", "--repeats", "2",
                                           "--kernel-length", "64", "--json", str(tmp_path / "throughput.json")]) == 0
    report = json.loads((tmp_path / "throughput.json").read_text())
    cells = {p["mode"]: p["cells"] for p in report["points"]}
    assert set(cells) == {"prefill", "train", "decode"} and cells["prefill"]["protot"]["tokens_per_s"] > 0
    assert all(cells["train"][m]["tokens_per_s"] > 0 for m in ("protot", "attention")), cells["train"]
    assert "ratio" in cells["prefill"]["protot"] and "ratio" not in cells["prefill"]["attention"]
    assert 0 < report["kernel"]["fraction"] and report["kernel"]["label"] == "chunked forward+backward"

    (tmp_path / "status").write_text("env 0 3\nparity 0 20\ncuda-tests 1 4\nthroughput 124 170\n")
    text = scripts["gpu_report"].summary(tmp_path)
    assert "TIMED OUT" in text and "FAILED (exit 1)" in text
    assert "protot          chunked      decode" in text and "3/3 comparisons within tolerance" in text
    assert "CUDA tests: no report" in text  # no pytest.xml: said so, the rest still printed
    assert "    16 prefill" in text and "crossover protot:" in text


def test_training_part_measures_each_mixer_and_the_summary_shows_it(scripts, tmp_path):
    """The training part at tiny sizes (as --dry-run runs it): real steps, a row per mixer in the summary, and a
    mixer that fails is its own row while the others are still measured."""
    assert scripts["gpu_train"].main(["--device", "cpu", "--preset", "tiny", "--mixers", "protot,attention,no-such",
                                      "--steps", "3", "--warmup-steps", "1", "--max-train-docs", "40",
                                      "--json", str(tmp_path / "train.json")]) == 1  # no-such failed
    report = json.loads((tmp_path / "train.json").read_text())
    rows = {r["mixer"]: r for r in report["rows"]}
    assert report["peak_source"].startswith("MEASURED") and report["peak_tflops"] > 0 and report["gpu_count"] == 0
    for name in ("protot", "attention"):
        r = rows[name]
        assert r["timed_steps"] == 3 and r["steps_done"] == 4 and r["tokens_per_step"] == 8 * 128
        assert 0 < r["tokens_per_s_min"] <= r["tokens_per_s"] <= r["tokens_per_s_max"]
        assert r["tokens_per_s_wall"] > 0 and r["model_flops_per_s"] > 0 and 0 < r["mfu"]
        assert math.isfinite(r["final_loss"]) and r["final_loss"] < r["first_loss"] <= math.log(512) + 0.1
        assert r["peak_memory_bytes"] is None and r["kernel"] == {"protot": "chunked", "attention": "sdpa"}[name]
    assert rows["attention"]["mfu_with_attention"] > rows["attention"]["mfu"]
    assert "mfu_with_attention" not in rows["protot"]
    assert "unknown mixer 'no-such'" in rows["no-such"]["error"]

    (tmp_path / "status").write_text("env 0 3\ntrain 1 9\n")
    text = scripts["gpu_report"].summary(tmp_path)
    lines = text.splitlines()
    for name in ("protot", "attention"):
        row = next(line for line in lines if line.split()[:2] == [name, rows[name]["kernel"]])
        assert "%" in row and f"{rows[name]['final_loss']:.2f}" in row
    assert any(line.split()[:2] == ["no-such", "ERROR:"] for line in lines)
    assert "with attention's 6*L*T*d added" in text and "preset tiny, batch 8 x context 128" in text
    assert "GPUs: 0" in text and "NCCL torchrun, 2 processes: not run: no GPU" in text
    assert "throughput: no results" in text  # the other parts' absence is said, the training rows still printed

    (tmp_path / "env.json").write_text(json.dumps({"gpu_count": 1, "devices": ["NVIDIA H200"]}))
    text = scripts["gpu_report"].summary(tmp_path)
    assert "GPUs: 1 (NVIDIA H200)" in text and "not run: one GPU" in text


def test_peak_rate_comes_from_the_argument_or_the_datasheet_table(scripts, monkeypatch):
    train = scripts["gpu_train"]
    assert train.peak_flops(train.torch.device("cpu"), 989.0) == (989e12, "--peak-tflops")
    monkeypatch.setattr(train.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert train.peak_flops(train.torch.device("cuda"), None)[0] == 989e12
    monkeypatch.setattr(train.torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert train.peak_flops(train.torch.device("cuda"), None)[0] == 756e12
