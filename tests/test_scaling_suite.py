"""The scaling study end to end (docs/scaling.md): ladders in plans, learning curves and FLOPs recorded by
training, the scaling suite's per-model losses, the fits, crossovers and orderings it writes to the store, the
command's tables and the site's section and learning-curve plots."""

from __future__ import annotations

import math

import pytest
import yaml

from harness.cli import main
from harness.errors import ConfigError
from harness.model.checkpoint import load_checkpoint
from harness.model.flops import spec_flops_per_token
from harness.running.plan import load_plan, plan_from_dict
from harness.running.training import curve_steps
from harness.store.results import ResultsStore

LADDER = """
name: tiny-ladder
preset: tiny
mixers: [attention]
controls: [none]
data: {max_train_docs: 40}
suites:
  scaling: {max_windows: 24, bootstrap: 60}
ladder:
  - {tokens: 8192}
  - {tokens: 16384}
  - {train: {token_budget: 32768}}
"""


def test_curve_steps_are_log_spaced_from_the_first_to_the_last_step():
    steps = curve_steps(320, 16)
    assert steps[0] == 1 and steps[-1] == 320 and steps == sorted(set(steps))
    ratios = [b / a for a, b in zip(steps[4:], steps[5:])]
    assert max(ratios) / min(ratios) < 1.6  # evenly spread on a log axis once rounding stops merging steps
    assert curve_steps(320, 0) == [] and curve_steps(1, 16) == [1]


@pytest.mark.parametrize("ladder, message", [
    ("[]", "non-empty list"),
    ("[{}]", "is empty"),
    ("[{width: 64}]", "unknown key 'width'"),
    ("[{tokens: 8192, train: {token_budget: 8192}}]", "not both"),
    ("[{train: {seed: 3}}]", "not in a ladder rung"),
    ("[{tokens: 8192}, {tokens: 8192}]", "twice"),
])
def test_ladder_mistakes_are_named(ladder, message):
    raw = {"preset": "tiny", "mixers": ["attention"], "suites": ["scaling"], "ladder": yaml.safe_load(ladder)}
    with pytest.raises(ConfigError, match=message):
        plan_from_dict(raw)


def test_a_ladder_makes_one_request_per_rung_with_its_overrides_on_top(tmp_path):
    path = tmp_path / "ladder.yaml"
    path.write_text(LADDER + "backbone: {d_model: 32}\n")
    plan = load_plan(path)
    assert plan.jobs == 3 * 2  # rungs x (mixer + control)
    reqs = plan.requests("cpu")
    assert [r.train_overrides["token_budget"] for r in reqs] == [8192, 16384, 32768]
    assert all(r.backbone_overrides == {"d_model": 32} for r in reqs)
    shipped = load_plan("suites/scaling/cpu-ladder.yaml")
    assert len(shipped.ladder) == 5 and "scaling" in shipped.suites
    assert len(load_plan("plans/scaling-gpu.yaml").ladder) == 5


@pytest.fixture(scope="module")
def ladder_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaling")
    plan = root / "ladder.yaml"
    plan.write_text(LADDER)
    assert main(["scaling", "--plan", str(plan), "--results", str(root / "store"), "--no-progress"]) == 0
    return ResultsStore(root / "store")


def test_training_records_the_learning_curve_and_the_declared_flops(ladder_store):
    runs = [r for r in ladder_store.iter_runs(samples=False) if r.manifest.kind == "suite"]
    assert len(runs) == 6
    for run in runs:
        s = run.manifest.subject
        ckpt = load_checkpoint(s.checkpoint)
        tokens = ckpt.meta["tokens_seen"]
        per_token = spec_flops_per_token(ckpt.spec.model).total
        assert s.train_flops == pytest.approx(tokens * per_token, rel=1e-9)
        curve = s.learning_curve
        assert [p["step"] for p in curve] == curve_steps(ckpt.meta["total_steps"], ckpt.spec.train.curve_points)
        assert curve[-1]["tokens"] == tokens and curve[-1]["flops"] == pytest.approx(s.train_flops)
        assert all(a["flops"] < b["flops"] for a, b in zip(curve, curve[1:]))
        assert curve[-1]["loss"] < curve[0]["loss"]  # a model that trained at all
        loss = run.metric("loss")
        assert loss.interval.low <= loss.value <= loss.interval.high and loss.role == "diagnostic"
        assert len(loss.items) >= 10  # one item per held-out document


def test_the_aggregate_fits_each_mixer_and_orders_every_rung(ladder_store):
    fits = [r for r in ladder_store.iter_runs(samples=False) if r.manifest.kind == "aggregate"]
    assert sorted(r.manifest.extra["series"] for r in fits) == ["attention", "none"]
    info = fits[0].manifest.suite_info
    assert info == fits[1].manifest.suite_info  # each fitted mixer's run carries the whole ladder
    assert [o["tokens"] for o in info["orderings"]] == [8192, 16384, 32768]
    for o in info["orderings"]:
        assert sorted(o["order"]) == ["attention", "none"] and set(o["groups"]) == {"attention", "none"}
    for run in fits:
        series = info["series"][run.manifest.extra["series"]]
        assert len(series["points"]) == 3 and series["fit"] is not None
        # the run sits on the row of the mixer's largest model
        assert run.manifest.subject.id == max(
            (r for r in ladder_store.iter_runs(samples=False) if r.manifest.kind == "suite"
             and r.manifest.subject.mixer == run.manifest.subject.mixer),
            key=lambda r: r.manifest.subject.train_flops).manifest.subject.id
        alpha = run.metric("alpha")
        assert alpha.value > 0 and alpha.interval is not None and alpha.interval.kind == "bootstrap"
        assert {m.name for m in run.metrics} >= {"alpha", "E", "loss_at_10x", "loss_at_paper-small"}
        fitted = series["fit"]
        for point in series["points"]:  # three points, three parameters: the curve passes near each
            predicted = fitted["E"] + fitted["A"] * point["flops"] ** -fitted["alpha"]
            assert math.isclose(predicted, point["loss"], rel_tol=0.02)
    (cross,) = info["crossovers"]
    assert cross["verdict"] in ("cross", "no crossover", "undetermined", "extrapolated") and cross["sentence"]
    # one mixer: nothing to share E with; the control keeps its own. Tokens per parameter per rung and series
    assert info["series"]["attention"]["fit"]["shared_E"] == [] and info["series"]["none"]["fit"]["shared_E"] == []
    for o in info["orderings"]:
        for name, ratio in o["tokens_per_parameter"].items():
            params = info["series"][name]["points"][0]["parameters"]
            assert ratio == pytest.approx(o["tokens"] / params) and o["seeds"][name] == 1


def test_a_refit_replaces_the_runs_and_the_command_prints_the_tables(ladder_store, capsys):
    before = sorted(r.run_id for r in ladder_store.iter_runs(samples=False) if r.manifest.kind == "aggregate")
    assert main(["scaling", "--fit-only", "--plan", str(ladder_store.local_path.parent / "ladder.yaml"),
                 "--results", str(ladder_store.local_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "alpha (95%)" in out and "ordering, best first" in out and "replicates crossing" in out
    assert "tokens per parameter" in out and "seed spread" in out and "seeds per rung" in out
    after = sorted(r.run_id for r in ladder_store.iter_runs(samples=False) if r.manifest.kind == "aggregate")
    assert after == before


def test_the_site_draws_the_ladder_and_the_learning_curves(ladder_store, tmp_path):
    from harness.reporting.publish import publish_site

    site = publish_site(ladder_store, tmp_path / "site")
    (page,) = [p.read_text() for p in (site / "suites").glob("scaling-*.html")]
    assert "Fits per mixer" in page and "Crossovers of every pair" in page and "Ordering at every rung" in page
    assert ".png" in page
    index = (site / "index.html").read_text()
    assert "Learning curves" in index and (site / "curves" / "preset-0.png").stat().st_size > 5000


def test_an_empty_store_says_why_there_is_no_ladder(tmp_path, capsys):
    assert main(["scaling", "--fit-only", "--results", str(tmp_path / "empty"), "--no-progress"]) == 0
    assert "no scaling ladder" in capsys.readouterr().out
