"""Nightly runs: snapshots, comparison with the previous night, history and plots, exit codes, --publish."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from harness.cli import main
from harness.running.nightly import compare, list_snapshots, read_snapshot, record_night, snapshot_id
from harness.running.plan import NightlyPolicy, Plan, Tolerance
from harness.store.results import ResultsStore
from harness.running.runner import GridReport
from harness.stats import Interval
from harness.suite import Metric, SuiteResult
from tests.planted import manifest, score, subject

PLAN = """\
name: tiny-nightly
presets: [tiny]
mixers: [protot, attention]
controls: []
suites:
  perplexity: {max_windows: 16, bootstrap: 100, splits: [test]}
train: {token_budget: 32768}
data: {max_train_docs: 40}
nightly: {rel_tolerance: 0.01}
"""


Z = 1.959964


def row(metric="ppl", value=100.0, lo=None, hi=None, hib=False, mixer="protot", suite="perplexity", kind="bootstrap"):
    interval = None if lo is None else Interval(lo, hi, kind, None if kind == "range" else 0.95).to_json()
    return {"suite": suite, "model": mixer, "preset": "tiny", "metric": metric, "value": value,
            "interval": interval, "higher_is_better": hib, "unit": ""}


# ------------------------------------------------------------------------------------- the comparison rule


def test_threshold_combines_both_nights_standard_errors():
    tol = Tolerance(rel_tolerance=0.01, abs_tolerance=0.0, ci_scale=1.0)
    # standard errors 3 and 4 -> combined 5 (3-4-5), times the 95% normal quantile, above 1% of 100
    assert tol.threshold(100.0, 3.0, 4.0) == pytest.approx(5.0 * Z)
    assert tol.threshold(100.0, None, None) == pytest.approx(1.0)  # no interval: the relative floor
    assert Tolerance(0.0, 2.5, 0.0).threshold(100.0, 3.0, 4.0) == 2.5


def test_a_min_max_range_is_not_read_as_a_confidence_interval():
    """95% half-widths 3 and 4 combine to a 5-wide margin; the same numbers as min-max ranges add nothing."""
    policy = NightlyPolicy(Tolerance(0.01, 0.0, 1.0))
    ci = compare([row(value=100, lo=97, hi=103)], [row(value=104.9, lo=100.9, hi=108.9)], policy)[0]
    spread = compare([row(value=100, lo=97, hi=103, kind="range")],
                     [row(value=104.9, lo=100.9, hi=108.9, kind="range")], policy)[0]
    assert ci.status == "unchanged" and ci.threshold == pytest.approx(5.0, rel=1e-4)
    assert spread.status == "regression" and spread.threshold == pytest.approx(1.0)


@pytest.mark.parametrize(
    "before, after, status",
    [
        (row(value=100, lo=97, hi=103), row(value=104.9, lo=100.9, hi=108.9), "unchanged"),  # within sqrt(3²+4²)=5
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
        m = manifest("perplexity", subject(mixer), headline=("ppl",))
        metrics = [score("ppl", ppl, False, hw * Z), score("bpb", 4.0, False, role="diagnostic")]
        store.write_run(f"{mixer}-ppl", m, SuiteResult(metrics), force=True)

    write("protot", 100.0, 3.0)
    write("attention", 120.0, 3.0)
    store.write_run("other", manifest("perplexity", subject("mamba")),
                    SuiteResult([Metric("ppl", 1.0, False)]))  # not in the plan: never compared
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    first = record_night(plan, store, GridReport(), t0)
    assert first.previous_id is None and first.exit_code == 0
    write("attention", 124.0, 4.0)  # +4 < 1.96 sqrt(3²+4²) = 9.8: noise
    second = record_night(plan, store, GridReport(), t0 + timedelta(days=1))
    assert second.previous_id == first.snapshot_id and second.exit_code == 0 and not second.regressions
    write("attention", 136.0, 4.0)  # +12 over the last night > 1.96 sqrt(4²+4²) = 11.1
    third = record_night(plan, store, GridReport(), t0 + timedelta(days=2))
    assert [c.key for c in third.regressions] == [("perplexity", "attention", "tiny", "ppl")]
    assert third.exit_code == 1
    assert list_snapshots(store, "mem") == [first.snapshot_id, second.snapshot_id, third.snapshot_id]
    snap = read_snapshot(store, "mem", third.snapshot_id)
    assert {r["model"] for r in snap["rows"]} == {"protot", "attention"}
    assert snap["changes"][0]["status"] == "regression" and snap["changes"][0]["delta"] == pytest.approx(12.0)
    history = store.read_file("nightly/mem/history.csv").decode().splitlines()
    assert history[0].count(",") == 3 + 3  # the key columns, then one per night
    assert any(line.startswith("perplexity,attention,tiny,ppl,120.0,124.0,136.0") for line in history)
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
    run = next(r for r in store.iter_runs() if r.manifest.subject.mixer == "attention")
    old = next(m for m in run.metrics if m.name == "ppl")
    worse = dataclasses.replace(old, value=old.value * 1.3, items=None, interval=Interval(
        old.interval.low * 1.3, old.interval.high * 1.3, old.interval.kind, old.interval.level))
    metrics = [worse if m.name == "ppl" else m for m in run.metrics]
    store.write_run(run.run_id, run.manifest, SuiteResult(metrics, run.samples), force=True)
    # independent reference: the rule applied by hand to the two records
    hw_old, hw_new = old.interval.half_width, worse.interval.half_width
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
    assert len(regressions) == 1 and regressions[0].strip().startswith("perplexity/ppl [attention (max_train_docs=40, token_budget=32768)/tiny]")
    assert "; code " in regressions[0] and "mixer " in regressions[0] and "suite " in regressions[0]

    sids = list_snapshots(store, "tiny-nightly")
    assert len(sids) == 3
    last = json.loads(store.read_file(f"nightly/tiny-nightly/{sids[-1]}.json"))
    assert last["compared_with"] == sids[1] and last["grid"]["trained"] == 0
    assert [(c["model"], c["metric"], c["status"]) for c in last["changes"]] == [
        ("attention (max_train_docs=40, token_budget=32768)", "ppl", "regression")]
    assert last["changes"][0]["code_after"]["mixer_code"] == last["changes"][0]["code_before"]["mixer_code"]
    assert (root / "nightly" / "tiny-nightly" / "history.md").read_text().count("| perplexity |") >= 10
    assert (root / "nightly" / "tiny-nightly" / "plots" / "perplexity__ppl.png").read_bytes()[:4] == b"\x89PNG"


def test_publish_without_the_publisher_is_a_clear_error_before_any_work(tmp_path, capsys, monkeypatch):
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(PLAN)
    monkeypatch.setitem(sys.modules, "harness.reporting.publish", None)  # the module missing: cannot be caused otherwise
    code = main(["nightly", str(plan_file), "--results", str(tmp_path / "store"), "--publish", str(tmp_path / "site")])
    assert code == 2
    assert "--publish needs harness.reporting.publish.publish_site" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()
