"""Nightly runs: snapshots, comparison with the previous night, history and plots, exit codes, --publish."""

from __future__ import annotations

import json
import math
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from harness.cli import main
from harness.nightly import compare, list_snapshots, read_snapshot, record_night, snapshot_id
from harness.plan import NightlyPolicy, Plan, Tolerance
from harness.results import ResultsStore
from harness.runner import GridReport
from harness.suite import Metric, SuiteResult

PLAN = """\
name: tiny-nightly
presets: [tiny]
mixers: [protot, attention]
suites:
  perplexity: {max_windows: 16, bootstrap: 100, splits: [test]}
train: {token_budget: 32768}
data: {max_train_docs: 40}
nightly: {rel_tolerance: 0.01}
"""


def row(metric="ppl", value=100.0, lo=None, hi=None, hib=False, mixer="protot", suite="perplexity", seed=0):
    return {"suite": suite, "mixer": mixer, "preset": "tiny", "seed": seed, "metric": metric, "value": value,
            "ci_low": lo, "ci_high": hi, "higher_is_better": hib, "unit": ""}


# ------------------------------------------------------------------------------------- the comparison rule


def test_threshold_combines_both_nights_ci_half_widths():
    tol = Tolerance(rel_tolerance=0.01, abs_tolerance=0.0, ci_scale=1.0)
    # half-widths 3 and 4 -> combined 5 (3-4-5), above 1% of 100
    assert tol.threshold(100.0, 3.0, 4.0) == pytest.approx(5.0)
    assert tol.threshold(100.0, None, None) == pytest.approx(1.0)  # no CI: the relative floor
    assert Tolerance(0.0, 2.5, 0.0).threshold(100.0, 3.0, 4.0) == 2.5


@pytest.mark.parametrize(
    "before, after, status",
    [
        (row(value=100, lo=97, hi=103), row(value=104.9, lo=101, hi=109), "unchanged"),  # within sqrt(3²+4²)=5
        (row(value=100, lo=97, hi=103), row(value=105.1, lo=101.1, hi=109.1), "regression"),  # lower is better
        (row(value=100, lo=97, hi=103), row(value=94.9, lo=90.9, hi=98.9), "improvement"),
        (row(value=0.50, hib=True), row(value=0.49, hib=True), "regression"),  # accuracy fell by 2% > 1%
        (row(value=0.50, hib=True), row(value=0.497, hib=True), "unchanged"),
        (row(value=100), row(value=math.nan), "regression"),  # a metric that became NaN
    ],
)
def test_compare_classifies_by_direction_and_tolerance(before, after, status):
    policy = NightlyPolicy(Tolerance(0.01, 0.0, 1.0))
    (change,) = compare([before], [after], policy)
    assert change.status == status


def test_missing_new_and_per_suite_tolerances():
    policy = NightlyPolicy(Tolerance(0.01), {"throughput": Tolerance(0.25)})
    before = [row(), row(metric="tokens_per_s", value=1000.0, hib=True, suite="throughput"), row(mixer="attention")]
    after = [row(), row(metric="tokens_per_s", value=800.0, hib=True, suite="throughput"), row(mixer="mamba")]
    by_mixer = {(c.key[0], c.key[1]): c.status for c in compare(before, after, policy)}
    assert by_mixer == {
        ("perplexity", "protot"): "unchanged",
        ("throughput", "protot"): "unchanged",  # -20% is inside the throughput suite's 25%
        ("perplexity", "attention"): "missing",
        ("perplexity", "mamba"): "new",
    }


def test_snapshot_ids_sort_in_time():
    t = datetime(2026, 1, 9, 23, 59, 59, 999999, tzinfo=timezone.utc)
    ids = [snapshot_id(t + timedelta(microseconds=k)) for k in (0, 1, 2)]
    assert ids == sorted(ids) and ids[0] == "20260109T235959.999999Z"


# ---------------------------------------------------------------- snapshots on a non-local fsspec filesystem


def test_nights_on_a_memory_store_find_a_planted_drop():
    store = ResultsStore(f"memory://nightly-{uuid.uuid4().hex}")
    plan = Plan("mem", ("tiny",), ("protot", "attention"), ("perplexity",))

    def write(mixer: str, ppl: float, hw: float) -> None:
        manifest = {"suite": "perplexity", "mixer": mixer, "preset": "tiny", "seed": 0, "headline": ["ppl"]}
        metrics = [Metric("ppl", ppl, False, ppl - hw, ppl + hw, 50), Metric("bpb", 4.0, False)]
        store.write_run(f"{mixer}-ppl", manifest, SuiteResult(metrics), force=True)

    write("protot", 100.0, 3.0)
    write("attention", 120.0, 3.0)
    store.write_run("other", {"suite": "perplexity", "mixer": "mamba", "preset": "tiny", "seed": 0},
                    SuiteResult([Metric("ppl", 1.0, False)]))  # not in the plan: never compared
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = record_night(plan, store, GridReport(), t0)
    assert first.previous_id is None and first.exit_code == 0
    write("attention", 124.0, 4.0)  # +4 < sqrt(3²+4²) = 5: noise
    second = record_night(plan, store, GridReport(), t0 + timedelta(days=1))
    assert second.previous_id == first.snapshot_id and second.exit_code == 0 and not second.regressions
    write("attention", 131.0, 4.0)  # +7 over the last night > sqrt(4²+4²) = 5.66
    third = record_night(plan, store, GridReport(), t0 + timedelta(days=2))
    assert [c.key for c in third.regressions] == [("perplexity", "attention", "tiny", 0, "ppl")]
    assert third.exit_code == 1
    assert list_snapshots(store, "mem") == [first.snapshot_id, second.snapshot_id, third.snapshot_id]
    snap = read_snapshot(store, "mem", third.snapshot_id)
    assert {r["mixer"] for r in snap["rows"]} == {"protot", "attention"}
    assert snap["changes"][0]["status"] == "regression" and snap["changes"][0]["delta"] == pytest.approx(7.0)
    history = store.read_file("nightly/mem/history.csv").decode().splitlines()
    assert history[0].count(",") == 4 + 3  # the key columns, then one per night
    assert any(line.startswith("perplexity,attention,tiny,0,ppl,120.0,124.0,131.0") for line in history)
    assert store.read_file("nightly/mem/plots/perplexity__ppl.png")[:4] == b"\x89PNG"
    assert store.read_file("nightly/mem/plots/perplexity__bpb.png") is None  # headline metrics only


# ------------------------------------------------------------------------------ the acceptance scenario (CLI)


def test_plan_nightly_twice_then_a_planted_regression(tmp_path, capsys):
    plan_file, root = tmp_path / "plan.yaml", tmp_path / "store"
    plan_file.write_text(PLAN)
    args = ["nightly", str(plan_file), "--results", str(root), "--no-progress"]

    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 model(s) trained, 2 run(s) written" in out and "first night of this plan" in out

    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 already complete, 0 model(s) trained, 0 run(s) written, 0 failed" in out
    assert "0 regression, 0 improvement" in out and "0 missing" in out

    # plant a regression: attention's perplexity 30% worse, its CI moved with it; everything else unchanged
    store = ResultsStore(root)
    run = next(r for r in store.iter_runs() if r.manifest["mixer"] == "attention")
    old = next(m for m in run.metrics if m.name == "ppl")
    worse = Metric("ppl", old.value * 1.3, False, old.ci_low * 1.3, old.ci_high * 1.3, old.n, old.unit)
    metrics = [worse if m.name == "ppl" else m for m in run.metrics]
    manifest = {k: v for k, v in run.manifest.items() if k not in ("run_id", "written_at", "plots")}
    store.write_run(run.run_id, manifest, SuiteResult(metrics, run.samples), force=True)
    # independent reference: the rule applied by hand to the two records
    hw_old, hw_new = (old.ci_high - old.ci_low) / 2, (worse.ci_high - worse.ci_low) / 2
    assert worse.value - old.value > max(0.01 * old.value, math.hypot(hw_old, hw_new))

    site = tmp_path / "site"
    assert main([*args, "--publish", str(site)]) == 1  # the site is republished, the regression still fails
    out = capsys.readouterr().out
    assert "0 model(s) trained" in out and "1 regression," in out
    assert f"site republished to {site}" in out
    index = (site / "index.html").read_text()
    assert "protot" in index and "attention" in index
    listed = out.split("REGRESSIONS:\n")[1].splitlines()
    regressions = [line for line in listed[: next(i for i, x in enumerate(listed) if not x.startswith("  "))]]
    assert len(regressions) == 1 and regressions[0].strip().startswith("perplexity/ppl [attention/tiny seed 0]")

    sids = list_snapshots(store, "tiny-nightly")
    assert len(sids) == 3
    last = json.loads(store.read_file(f"nightly/tiny-nightly/{sids[-1]}.json"))
    assert last["compared_with"] == sids[1] and last["grid"]["trained"] == 0
    assert [(c["mixer"], c["metric"], c["status"]) for c in last["changes"]] == [("attention", "ppl", "regression")]
    assert (root / "nightly" / "tiny-nightly" / "history.md").read_text().count("| perplexity |") >= 10
    assert (root / "nightly" / "tiny-nightly" / "plots" / "perplexity__ppl.png").read_bytes()[:4] == b"\x89PNG"


def test_publish_without_the_publisher_is_a_clear_error_before_any_work(tmp_path, capsys, monkeypatch):
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(PLAN)
    monkeypatch.setitem(sys.modules, "harness.publish", None)  # the module missing: cannot be caused otherwise
    code = main(["nightly", str(plan_file), "--results", str(tmp_path / "store"), "--publish", str(tmp_path / "site")])
    assert code == 2
    assert "--publish needs harness.publish.publish_site" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()
