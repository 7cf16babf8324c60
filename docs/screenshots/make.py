"""Screenshots of the published site at 1280 px: index, a suite page, the throughput page, a model page
(docs/screenshots/README.md).

The committed reference board (``results/reference/board.json``: six models of preset ``quick``, 40 columns, every
number with its interval, the provenance of each row) is a board, not a results store, so this script first plants
a store that holds the same numbers: one run per model and suite, each metric with its value, interval, unit and
role, the row's parameters, FLOPs, training speed and provenance, a training loss curve and a throughput plot. It
then publishes that store with ``mixbench publish`` and screenshots four pages with headless Chromium::

    .venv/bin/python docs/screenshots/make.py   # writes docs/screenshots/{index,suite,throughput,model}-1280.png
    .venv/bin/python docs/screenshots/make.py --site /tmp/site_ref --width 1920
    .venv/bin/python docs/screenshots/make.py --results QUICKSTART_STORE  # a real store instead of the planted one

The planted runs carry no per-item values, so the tie groups, the control marks and the ranks are recomputed from
the intervals alone and need not match the reference board's; the layout is what the screenshots show. Not
imported by the tests.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.cli import main  # noqa: E402
from harness.store.results import ResultsStore  # noqa: E402
from harness.stats import Interval  # noqa: E402
from harness.suite import Metric, SuiteResult  # noqa: E402
from tests.planted import manifest, subject  # noqa: E402

REFERENCE = ROOT / "results" / "reference" / "board.json"
#: page -> (file pattern in the site, window height): the throughput page is taller, to show its side-by-side plots
PAGES = {"index": ("index.html", 1100), "suite": ("suites/perplexity-*.html", 1100),
         "throughput": ("suites/throughput-*.html", 1850), "model": ("rows/mamba-*.html", 1100)}


def plant(store_dir: Path, scratch: Path) -> ResultsStore:
    """A store with the reference board's numbers (see the module docstring)."""
    doc = json.loads(REFERENCE.read_text())
    columns = {c["name"]: c for c in doc["columns"]}
    store = ResultsStore(store_dir)
    for n, row in enumerate(doc["rows"]):
        prov = row["provenance"]
        ppl = row["cells"].get("perplexity/ppl", {}).get("value", 50.0)
        final = math.log(ppl) - 0.05
        curve = [{"step": s, "loss": round(final + (6.3 - final) * math.exp(-s / 60), 4)} for s in range(10, 330, 10)]
        for point in curve[7::8]:
            point["val_loss"] = round(point["loss"] + 0.04, 4)
        s = subject(
            row["mixer"], preset=row["preset"], seed=0, parameters=row["parameters"], state_floats=row["state_floats"],
            train_flops=row["train_flops"], train_tokens_per_s=row["train_tokens_per_s"], control=row["control"],
            context_free=row["mixer"] == "none", loss_curve=curve, backbone={"context": 256}, device="cpu",
            dtype="float32", kernel="torch", packages=prov.get("packages") or {},
            checkpoint=str(store_dir / "checkpoints" / f"{row['mixer']}-{row['preset']}"),
        )
        provenance = {
            "mixbench": prov.get("mixbench"), "git": {"commit": prov.get("revision"), "dirty": bool(prov.get("dirty"))},
            "python": "3.11.2", "implementation": "cpython",
            "platform": "Linux-6.1.0-28-cloud-amd64-x86_64-with-glibc2.36",
            "packages": prov.get("packages") or {},
            "hardware": {"cpu": prov.get("cpu"), "logical_cores": 2, "usable_cores": 2,
                         "torch_threads": prov.get("threads"), "memory_bytes": 8 * 2**30, "cuda": None},
        }
        by_suite: dict[str, list[Metric]] = defaultdict(list)
        for name, cell in row["cells"].items():
            c = columns[name]
            iv = cell.get("interval")
            interval = None if iv is None else Interval(iv["low"], iv["high"], iv["kind"], iv.get("level"))
            value = math.nan if cell["value"] is None else cell["value"]
            by_suite[c["suite"]].append(Metric(c["metric"], value, c["higher_is_better"], role=c["role"],
                                               interval=interval, n=cell.get("n"), unit=c.get("unit") or "",
                                               unreliable=cell.get("unreliable"), chance=cell.get("chance")))
        for k, (suite, metrics) in enumerate(sorted(by_suite.items())):
            m = manifest(suite, s, provenance=provenance, timings={"eval_s": 2.0 + 1.37 * k, "train_s": 27.9})
            plots = [_throughput_plot(scratch / f"{row['mixer']}-time_vs_length.png", row)] \
                if suite == "throughput" else []
            store.write_run(f"{n:02d}{k:02d}{row['row'][:12]}", m, SuiteResult(metrics, plots=plots))
    return store


def _throughput_plot(path: Path, row: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = row["cells"].get("throughput/prefill_tok_s", {}).get("value") or 1e4
    exponent = row["cells"].get("throughput/prefill_exponent", {}).get("value") or 1.0
    lengths = [64, 128, 256, 512, 1024]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.loglog(lengths, [(t / 64) ** exponent * 64 / speed for t in lengths], marker="o")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("prefill time (s)")
    ax.set_title(f"{row['mixer']}: prefill time against length", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def screenshot(url: str, shot: Path, width: int, height: int, profile: Path) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("chromium is not installed (`make test-deps` installs it)")
    cmd = [exe, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
           "--mute-audio", "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
           "--virtual-time-budget=5000", "--hide-scrollbars", f"--window-size={width},{height}",
           f"--screenshot={shot}", url]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def run(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where the PNGs go")
    ap.add_argument("--site", type=Path, help="publish the site here and keep it (default: a temporary folder)")
    ap.add_argument("--results", type=Path, help="publish this results store (e.g. a quickstart's) instead of "
                                                  "planting one from results/reference/board.json")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, help="window height in px (default: 1100, the throughput page 1850)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mixbench-shots-") as tmp:
        work = Path(tmp)
        (work / "scratch").mkdir()
        store = args.results
        if store is None:
            store = work / "results"
            plant(store, work / "scratch")
        site = args.site or work / "site"
        if main(["publish", "--results", str(store), "--out", str(site)]) != 0:
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        for name, (pattern, height) in PAGES.items():
            page = next(iter(sorted(site.glob(pattern))))
            shot = args.out / f"{name}-{args.width}.png"
            screenshot(page.as_uri(), shot, args.width, args.height or height, work / "profile")
            print(f"{shot}  ({page.relative_to(site)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
