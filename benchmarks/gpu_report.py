"""The single summary table of ``benchmarks/gpu_check.sh``: every part's status, the GPUs, the parity rows, the
training speed per mixer, the throughput grid.

Reads the folder the script wrote: ``status`` (one line per part: name, exit code, seconds), ``env.json`` (the
environment part: GPU count and names), ``parity.json`` (``benchmarks/gpu_parity.py --json``), ``pytest.xml``
(JUnit), ``train.json`` (``benchmarks/gpu_train.py --json``) and ``throughput.json``
(``benchmarks/gpu_throughput.py --json``). A part that is missing or failed is reported as such; the summary
is printed whatever is there.

    python benchmarks/gpu_report.py LOG_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from gpu_throughput import table as throughput_table  # sibling scripts (this folder is on sys.path)
from gpu_train import table as train_table

RESULT = {0: "ok", 124: "TIMED OUT", 137: "KILLED"}


def part_rows(log: Path) -> list[str]:
    rows = []
    status = log / "status"
    for line in status.read_text().splitlines() if status.exists() else []:
        name, rc, seconds = (line.split() + ["", ""])[:3]
        code = int(rc) if rc.lstrip("-").isdigit() else -1
        rows.append(f"  {name:<12} {RESULT.get(code, f'FAILED (exit {code})'):<18} {seconds:>6} s")
    return rows or ["  (no part ran)"]


def gpu_rows(log: Path) -> list[str]:
    """How many GPUs the check saw, and why the 2-process NCCL torchrun training (tests/test_distributed.py runs
    it with gloo on CPUs) is not among the parts: it needs two GPUs, and the check is made for one."""
    count, names = None, []
    for name in ("env.json", "train.json"):  # the environment part's count, else the training part's
        path = log / name
        if count is None and path.exists():
            data = json.loads(path.read_text())
            count, names = data.get("gpu_count"), data.get("devices", [])
    if count is None:
        return ["  GPUs: unknown (no env.json or train.json)", "  NCCL torchrun, 2 processes: not run"]
    seen = f"  GPUs: {count}" + (f" ({', '.join(sorted(set(names)))})" if names else "")
    if count < 2:
        why = "no GPU" if count == 0 else "one GPU"
    else:
        why = f"not a part of this check ({count} GPUs here: torchrun --nproc-per-node 2 -m harness.cli train by hand)"
    return [seen, f"  NCCL torchrun, 2 processes: not run: {why}"]


def part_results(log: Path, file: str, what: str, rows: Callable[[dict], list[str]]) -> list[str]:
    """``rows`` of the JSON a part wrote to ``file``; a part that wrote none (it failed first) says so."""
    path = log / file
    if not path.exists():
        return [f"  {what}: no results (see the part's output above)"]
    return rows(json.loads(path.read_text()))


def parity_rows(data: dict) -> list[str]:
    rows = [f"  {'mixer':<16}{'kernel':<13}{'mode':<8}{'max rel':>10}{'tol':>8}  result   ({data.get('device')})"]
    for r in data["rows"]:
        if "error" in r:
            rows.append(f"  {r['mixer']:<16}{'':<13}{r['mode']:<8}  ERROR {r['error'][:70]}")
        else:
            rows.append(f"  {r['mixer']:<16}{r['kernel']:<13}{r['mode']:<8}{r['max_rel']:>10.1e}{r['tolerance']:>8.0e}  "
                        f"{'ok' if r['passed'] else 'FAIL'}")
    n_ok = sum(bool(r.get("passed")) for r in data["rows"])
    rows.append(f"  {n_ok}/{len(data['rows'])} comparisons within tolerance")
    return rows


def pytest_rows(log: Path) -> list[str]:
    path = log / "pytest.xml"
    if not path.exists():
        return ["  CUDA tests: no report (see the part's output above)"]
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    rows = [f"  CUDA tests: {counts['tests']} run, {counts['failures']} failed, {counts['errors']} errors, "
            f"{counts['skipped']} skipped"]
    for case in suite.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            rows.append(f"    FAIL {case.get('classname')}::{case.get('name')}: {(bad.get('message') or '')[:90]}")
    return rows


def throughput_rows(data: dict) -> list[str]:
    head = (f"  {data['device']}; torch {data['torch']}; preset {data['preset']}, batch {data['batch']}, "
            f"autocast {data['dtype']}; kernels " + ", ".join(f"{m} {k}" for m, k in data["kernels"].items()))
    return [head] + ["  " + line for line in throughput_table(data).splitlines()]


def train_rows(data: dict) -> list[str]:
    first = next((r for r in data["rows"] if "batch" in r), {})
    shape = f"batch {first['batch']} x context {first['context']}, " if first else ""
    head = (f"  {data['device']}; torch {data['torch']}; preset {data['preset']}, {shape}{data['dtype']}; "
            f"{data['warmup_steps']} + {data['steps']} steps")
    return [head] + ["  " + line for line in train_table(data).splitlines()]


def summary(log: Path) -> str:
    sections = [("parts", part_rows(log)), ("GPUs", gpu_rows(log)),
                ("parity (CUDA path vs CPU reference)", part_results(log, "parity.json", "parity", parity_rows)),
                ("CUDA-only tests", pytest_rows(log)),
                ("training (optimizer steps at the preset, no checkpoints)",
                 part_results(log, "train.json", "training", train_rows)),
                ("throughput", part_results(log, "throughput.json", "throughput", throughput_rows))]
    out = ["=" * 100, "GPU CHECK SUMMARY"]
    for title, rows in sections:
        out += [f"-- {title}", *rows]
    out.append("=" * 100)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python benchmarks/gpu_report.py LOG_DIR", file=sys.stderr)
        return 2
    print(summary(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
