"""`mixbench reproduce`: the verdict logic on planted numbers, the run index on a planted store, a target a user
registers, and every built-in target's whole pipeline at scale tiny (docs/reproductions.md)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.registry import TARGETS
from harness.reproduction import (
    CANNOT_FAIL, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, Check, Measured, RunIndex, overall, verdict,
)
from harness.store.results import ResultsStore
from tests.planted import control, manifest, put, score, subject

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("low, high, threshold, above, expected", [
    (0.92, 0.97, 0.9, True, REPRODUCED),          # the whole interval above
    (0.80, 0.88, 0.9, True, NOT_REPRODUCED),      # the whole interval below
    (0.85, 0.95, 0.9, True, INCONCLUSIVE),        # straddles
    (0.90, 0.95, 0.9, True, INCONCLUSIVE),        # touching the threshold is not clear of it
    (-0.3, -0.1, 0.0, False, REPRODUCED),         # "< 0" claims
    (0.1, 0.3, 0.0, False, NOT_REPRODUCED),
    (-0.1, 0.1, 0.0, False, INCONCLUSIVE),
])
def test_verdicts_on_planted_intervals(low, high, threshold, above, expected):
    measured = Measured((low + high) / 2, low, high, "bootstrap 95%")
    assert verdict(measured, threshold, above) == expected


def test_no_interval_or_no_number_proves_nothing():
    assert verdict(Measured(0.99), 0.9, True) == INCONCLUSIVE  # a point alone, however far from the threshold
    assert verdict(None, 0.9, True) == INCONCLUSIVE
    assert verdict(Measured(math.nan, 0.1, 0.2), 0.0, True) == INCONCLUSIVE
    assert verdict(Measured(0.5, math.nan, 0.6), 0.0, True) == INCONCLUSIVE


def test_a_target_is_reproduced_only_when_every_claim_is():
    yes = Check("a", 0.0, True, Measured(1.0, 0.5, 1.5))
    no = Check("b", 0.0, True, Measured(-1.0, -1.5, -0.5))
    maybe = Check("c", 0.0, True, Measured(0.0, -0.5, 0.5))
    assert overall([yes, yes]) == REPRODUCED
    assert overall([yes, maybe]) == INCONCLUSIVE
    assert overall([yes, maybe, no]) == NOT_REPRODUCED
    assert overall([]) == INCONCLUSIVE
    reported = Check("d", 0.0, True, Measured(-1.0, -1.5, -0.5), counts=False)  # a mixer the source did not test
    assert overall([yes, reported]) == REPRODUCED


def test_a_precondition_that_fails_makes_the_target_inconclusive_not_false():
    """Units that do not specialise at a budget make an intervention claim untestable there: the target says
    inconclusive whatever the claim's own checks say, and the precondition met lets them decide."""
    unmet = Check("units specialise", 0.0, True, Measured(0.0, -0.1, 0.1), precondition=True)
    met = Check("units specialise", 0.0, True, Measured(0.3, 0.1, 0.5), precondition=True)
    claim_fails = Check("mask lowers the word", -0.1, False, Measured(0.0, -0.01, 0.01))
    assert overall([unmet, claim_fails]) == INCONCLUSIVE
    assert overall([met, claim_fails]) == NOT_REPRODUCED
    assert overall([met, Check("x", 0.0, True, Measured(1.0, 0.5, 1.5))]) == REPRODUCED


def test_the_difference_of_two_independent_intervals():
    from harness.reproduction import interval_difference

    d = interval_difference(Measured(0.9, 0.8, 1.0), Measured(0.5, 0.47, 0.53))  # half-widths 0.1 and 0.03
    half = math.hypot(0.1, 0.03)
    assert (d.value, d.low, d.high) == pytest.approx((0.4, 0.4 - half, 0.4 + half))
    assert interval_difference(Measured(0.9), Measured(0.5, 0.4, 0.6)).low is None  # no interval on one side


def test_the_run_index_pairs_two_mixers_on_shared_items(tmp_path):
    """``a - b`` on the shared items equals the naive difference of item means, and its interval is a paired one
    (it is much narrower than unpaired intervals would be when the items vary a lot but the gap is constant)."""
    store = ResultsStore(tmp_path)
    rng = np.random.default_rng(0)
    base = rng.normal(3.0, 1.0, size=40)
    items_a = {f"doc{i}": float(v) for i, v in enumerate(base)}
    items_b = {f"doc{i}": float(v + 0.2) for i, v in enumerate(base)}
    items_b["only-b"] = 10.0  # not shared: left out
    ids = [put(store, manifest("perplexity", subject(m)), [score("ppl", float(np.mean(list(it.values()))), False,
                                                                 0.5, items=it)])
           for m, it in (("attention", items_a), ("none", items_b))]
    runs = RunIndex(store, ids + ["missing-run-id"])
    diff = runs.paired_difference("perplexity", "attention", "none", "ppl")
    assert diff.value == pytest.approx(-0.2) and diff.low == pytest.approx(-0.2) and diff.high == pytest.approx(-0.2)
    assert runs.measured("perplexity", "attention", "ppl").low == pytest.approx(float(np.mean(base)) - 0.5)
    assert runs.measured("perplexity", "mamba", "ppl") is None and runs.metric("perplexity", "none", "nope") is None


def _cli(*args: str, cwd: Path = REPO, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def test_list_names_each_target_with_its_source_claim_protocol_and_cost():
    out = _cli("reproduce", "--list")
    assert out.returncode == 0, out.stderr
    for name in TARGETS.names():
        block = out.stdout.split(f"\n{name}\n")[-1] if not out.stdout.startswith(name) else out.stdout
        for field in ("source:", "published:", "checked:", "protocol:", "departures:", "cost:"):
            assert field in block, (name, field)
    assert {"zoology-mqar", "mad-score", "throughput-physics", "leading-terms", "protot-intervention",
            "controls"} <= set(TARGETS.names())
    bad = _cli("reproduce", "no-such-target")
    assert bad.returncode == 2 and "no-such-target" in bad.stderr and "Traceback" not in bad.stderr


def test_a_user_target_registers_like_a_suite_and_its_verdict_sets_the_exit_code(tmp_path):
    """A plugin target (no built-in knows it) runs through the ordinary store: a mixer-scoped suite's runs land
    there, and a second call finds them instead of recomputing."""
    (tmp_path / "my_target.py").write_text(textwrap.dedent('''
        from harness.registry import register_target
        from harness.reproduction import Check, Step, Target

        @register_target("my-claim")
        class MyClaim(Target):
            source = "a hand-made claim"
            published = "attention recalls better than chance"
            checked = "attention MQAR accuracy > 0"

            def steps(self, scale):
                cfg = {"tasks": "mqar", "settings": "mqar:seq_len=32,num_kv_pairs=2,vocab_size=64",
                       "max_steps": 4, "eval_every": 2, "lrs": "3e-3", "test_examples": 32, "valid_examples": 16,
                       "extrapolation": "", "d_model": 16}
                return [Step("synthetic", ("attention",), cfg)]

            def checks(self, runs, scale):
                m = runs.measured("synthetic", "attention", "mqar/seq32_kv2_vocab64/acc")
                return [Check("attention accuracy", 2.0, True, m)]  # impossible: accuracy <= 1
    '''))
    store = tmp_path / "store"
    first = _cli("reproduce", "my-claim", "--scale", "tiny", "--plugin", "my_target", "--results", str(store),
                 "--no-progress", cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # not reproduced: exit 1
    assert "my-claim" in first.stdout and "NOT REPRODUCED" in first.stdout, first.stdout
    assert "attention accuracy" in first.stdout and "expected > 2" in first.stdout
    runs = sorted(p.name for p in (store / "runs").iterdir())
    kept = json.loads((store / "reproductions" / "tiny" / "my-claim.json").read_text())  # for the site's page
    assert kept["verdict"] == NOT_REPRODUCED and kept["checks"][0]["expected"] == "> 2" and kept["run_ids"] == runs
    second = _cli("reproduce", "my-claim", "--scale", "tiny", "--plugin", "my_target", "--results", str(store),
                  "--no-progress", cwd=tmp_path)
    assert second.returncode == 1 and sorted(p.name for p in (store / "runs").iterdir()) == runs


@pytest.mark.slow
def test_every_built_in_target_runs_its_pipeline_at_scale_tiny(tmp_path):
    """The whole pipeline of each target (training, suites, the store, the checks) at a smoke-test size. The
    verdicts at this size mean nothing; every check must be measured (no "missing") and rendered."""
    out = _cli("reproduce", "--all", "--scale", "tiny", "--negatives", "--results", str(tmp_path / "store"),
               "--no-progress", timeout=1500)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    for name in TARGETS.names():
        assert f"\n{name} (scale tiny" in "\n" + out.stdout, (name, out.stdout)
        block = ("\n" + out.stdout).split(f"\n{name} (scale tiny")[1].split("\n\n")[0]
        assert "\n  negative: " in block, (name, block)  # every negative ran and was checked
    assert "missing" not in out.stdout.split("negative:")[0], out.stdout
    # one summary line per target, "name (padded to 28) verdict (its note)", before the runs' numbers that every
    # scoring command ends with
    lines = out.stdout.splitlines()
    summary = [next(line for line in reversed(lines) if line.startswith(f"{name:<28} ")) for name in TARGETS.names()]
    assert all("the verdict means nothing at this scale" in line for line in summary)
    verdicts = {line.split()[0]: line.split(None, 1)[1].split(" (")[0].strip() for line in summary}
    assert set(verdicts.values()) <= {REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, CANNOT_FAIL}
    site = _cli("publish", "--results", str(tmp_path / "store"), "--out", str(tmp_path / "site"))
    assert site.returncode == 0, site.stderr[-3000:]
    page = (tmp_path / "site" / "reproductions.html").read_text()
    for name in TARGETS.names():  # every target's verdict, as the command printed it, and its plot
        assert f"{name} <small>(scale tiny)</small>: <span class=" in page and verdicts[name].strip() in page, name
    assert len(list((tmp_path / "site" / "reproductions").glob("*.png"))) == len(TARGETS.names())


def test_the_nightly_reproduce_plan_names_every_built_in_target(tmp_path):
    from harness.errors import MixbenchError
    from harness.running.reproduce import load_reproduce_plan

    plan = load_reproduce_plan(str(REPO / "plans" / "reproduce.yaml"))
    assert set(plan.targets) == set(TARGETS.names()) and plan.devices == {"cpu": "cpu", "gpu": "cuda"}
    for text, message in (("targets: [controls, nope]\n", "nope"), ("targets: controls\n", "list of target names"),
                          ("targets: [controls]\nextra: 1\n", "keys targets, scales"),
                          ("targets: [controls]\nscales: {huge: {device: cpu}}\n", "maps tiny, cpu, gpu"),
                          ("targets: [controls]\nscales: {cpu: {skip: [nope]}}\n", "must list targets of the plan"),
                          ("targets: [controls]\nscales: {cpu: {devise: cpu}}\n", "maps tiny, cpu, gpu"),
                          ("- a\n- b\n", "must be a mapping")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(MixbenchError, match=message):  # ConfigError, or UnknownNameError for a name
            load_reproduce_plan(str(bad))


def test_the_gpu_scale_off_a_gpu_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """It used to train a 16k-token tokenizer and start the GPU protocol on the CPU without a word."""
    import torch

    from tests.conftest import main

    cache, store = tmp_path / "cache", tmp_path / "store"
    monkeypatch.setenv("MIXBENCH_CACHE", str(cache))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["reproduce", "controls", "--scale", "gpu", "--results", str(store), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--scale gpu runs the sources' GPU-sized protocols" in err and "no CUDA device" in err, err
    assert not store.exists()
    assert [p for p in cache.rglob("*") if p.is_file() and "listings" not in p.parts] == []  # no tokenizer
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine asked for the CPU
    assert main(["reproduce", "controls", "--scale", "gpu", "--device", "cpu", "--results", str(store)]) == 2
    assert "--device cpu would run them on the CPU" in capsys.readouterr().err and not store.exists()


def test_a_verdict_at_the_smoke_scale_says_it_means_nothing_on_its_own_line(tmp_path):
    from harness.reporting.site_reproductions import reproductions_body
    from harness.reproduction import ReproductionRecord, SMOKE_NOTE
    from harness.running.reproduce import TargetResult, render_result

    checks = [Check("a check", 0.5, True, Measured(0.9, 0.8, 0.95, "wilson 95%"))]
    tiny = render_result(TargetResult("my-claim", "tiny", checks, 3.0)).splitlines()[0]
    assert tiny == f"my-claim (scale tiny, 3 s): REPRODUCED (negatives not run: --negatives) ({SMOKE_NOTE})"
    assert render_result(TargetResult("my-claim", "cpu", checks, 3.0, negatives=())).splitlines()[0] == \
        "my-claim (scale cpu, 3 s): REPRODUCED"
    records = [ReproductionRecord("my-claim", scale, tuple(checks), 3.0, "2026-01-01T00:00:00+00:00", None, "cpu",
                                  "s", "p", "c", "proto", "d") for scale in ("tiny", "cpu")]
    assert [json.loads(r.to_json())["verdict_note"] for r in records] == [SMOKE_NOTE, ""]
    page = reproductions_body(records, [], set(), {})
    heading = next(line for line in page.splitlines() if line.startswith("<h2") and "scale tiny" in line)
    assert "means nothing at this scale" in heading
    assert "means nothing" not in next(line for line in page.splitlines() if "scale cpu" in line and "<h2" in line)


def test_the_listing_is_accurate_and_names_each_config_once(capsys):
    """deltaproduct-s3's mixer is registered (its cost is measured), and its three steps under one suite config
    read as that config once with each mixer config, not the config three times."""
    from tests.conftest import main

    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    block = out.split("\ndeltaproduct-s3\n")[1].split("\n\n")[0]
    assert "not registered" not in block and "573 s at scale cpu" in block, block
    protocol = next(line for line in block.splitlines() if line.strip().startswith("protocol:"))
    assert protocol.count("tasks=s3") == 1, protocol
    assert "num_householder=2" in protocol and "num_householder=1" in protocol and protocol.count(", none") == 1


def test_every_built_in_target_has_a_kind_and_a_negative_that_changes_something():
    """A negative equal to the target would pass exactly when the target does: each must swap a subject or a
    setting for another value, through roles and settings the target declares."""
    from harness.registry import MIXERS
    from harness.reproduction import KINDS
    from harness.running.planned import PlannedRun

    for entry in TARGETS.entries():
        target = entry.cls(entry.make_config())
        assert target.kind in KINDS, entry.name
        for scale in ("tiny", "cpu", "gpu"):
            negatives = target.negatives(scale)
            assert negatives, (entry.name, scale)
            for n in negatives:
                changed = [r for r, s in n.swaps.items() if s != target.subject(r)] + \
                          [k for k, v in n.settings.items() if v != target.setting(k)]
                assert changed and n.label and n.why, (entry.name, scale, n)
            # every step of the target and its negatives names registered mixers and a suite config its suite
            # accepts (a task list built from a string's characters once reached the CPU run)
            steps = [s for t in (target, *map(target.negative_target, negatives)) for s in t.steps(scale)]
            for step in steps:
                for mixer in (*step.mixers, *step.controls):
                    MIXERS.get(mixer)
                PlannedRun.make(step.suite, step.suite_config, device="cpu")
    assert {e.name for e in TARGETS.entries() if e.cls.kind == "check"} >= {"controls", "leading-terms"}


PLANTED_TARGET = textwrap.dedent('''
    from harness.registry import register_target
    from harness.reproduction import Check, Measured, Negative, Subject, Target

    #: what each subject "scores": no training, so the verdict logic runs alone
    SCORES = {"attention": 0.95, "none": 0.2, "leaky": 0.97}

    @register_target("planted-claim")
    class Planted(Target):
        source = published = checked = "planted"
        subjects = {"subject": Subject("attention")}

        def negatives(self, scale):
            return [Negative("none in attention's place", "no mixing: no recall", {"subject": Subject("none")})]

        def steps(self, scale):
            return []

        def checks(self, runs, scale):
            s = self.subject("subject")
            v = SCORES.get(s.mixer, 0.5)
            return [Check(f"{s.label} recall", 0.9, True, Measured(v, v - 0.02, v + 0.02, "planted"))]
''')


def test_a_negative_that_passes_voids_the_verdict_and_a_failing_one_keeps_it(tmp_path, monkeypatch, capsys):
    """The planted claim holds for attention; its negative (`none`) fails it, so the verdict stands. Planted so that
    the negative passes too (every subject scores 0.97), the same target is 'cannot fail', exits 1, and its record
    and the site say so."""
    from harness.reporting.site_reproductions import reproductions_body
    from harness.reproduction import load_records
    from tests.conftest import main

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "planted_ok.py").write_text(PLANTED_TARGET)
    (tmp_path / "planted_leaky.py").write_text(PLANTED_TARGET.replace('"planted-claim"', '"leaky-claim"')
                                               .replace("SCORES.get(s.mixer, 0.5)", "0.97"))
    store = tmp_path / "store"
    common = ["--scale", "tiny", "--results", str(store), "--no-progress", "--negatives"]
    assert main(["reproduce", "planted-claim", "--plugin", "planted_ok", *common]) == 0
    out = capsys.readouterr().out
    assert "planted-claim (scale tiny, 0 s): REPRODUCED" in out and "negative: none in attention's place" in out
    assert "none recall" in out and "not reproduced" in out
    assert main(["reproduce", "leaky-claim", "--plugin", "planted_leaky", *common]) == 1
    out = capsys.readouterr().out
    assert "leaky-claim (scale tiny, 0 s): CANNOT FAIL (its own checks: reproduced; the negative none in " \
           "attention's place was reproduced too)" in out, out
    records = {r.target: r for r in load_records(ResultsStore(store))[0]}
    assert records["leaky-claim"].verdict == CANNOT_FAIL and records["leaky-claim"].own_verdict == REPRODUCED
    assert records["planted-claim"].verdict == REPRODUCED and records["planted-claim"].negatives[0].passed
    kept = json.loads((store / "reproductions" / "tiny" / "leaky-claim.json").read_text())
    assert kept["verdict"] == CANNOT_FAIL and kept["negatives"][0]["swaps"] == {"subject": {"mixer": "none",
                                                                                            "config": {}}}
    page = reproductions_body(list(records.values()), [], set(), {})
    assert "cannot fail" in page and "passed: the protocol cannot fail, the verdict is void" in page
    # without --negatives the verdict stands unchecked, and says so
    assert main(["reproduce", "leaky-claim", "--plugin", "planted_leaky", "--scale", "tiny", "--results",
                 str(store), "--no-progress"]) == 0
    assert "(negatives not run: --negatives)" in capsys.readouterr().out


def test_a_subject_swapped_on_the_command_line_reaches_the_checks(tmp_path, monkeypatch, capsys):
    """``--subject ROLE=MIXER`` runs a target's protocol on a user's mixer: the planted claim fails for `none`."""
    from tests.conftest import main

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "planted_ok.py").write_text(PLANTED_TARGET)
    args = ["reproduce", "planted-claim", "--plugin", "planted_ok", "--scale", "tiny", "--results",
            str(tmp_path / "store"), "--no-progress"]
    assert main([*args, "--subject", "subject=none"]) == 1
    out = capsys.readouterr().out
    assert "NOT REPRODUCED" in out and "none recall" in out and "attention recall" not in out
    assert main([*args, "--subject", 'subject=deltanet:{"allow_neg_eigval": true}']) == 1
    assert "deltanet (allow_neg_eigval=True) recall" in capsys.readouterr().out
    for bad, message in (("nosuchrole=none", "no target asked for has the role nosuchrole"),
                         ("subject", "expected ROLE=MIXER"), ("subject=none:[1]", "must be a JSON object"),
                         ("subject=no-such-mixer", "no-such-mixer")):
        assert main([*args, "--subject", bad]) == 2, bad
        assert message in capsys.readouterr().err, bad


def test_records_keep_kind_and_negatives_and_old_records_still_read():
    from harness.errors import MixbenchError
    from harness.reproduction import NegativeResult, ReproductionRecord, Subject

    yes = Check("a", 0.0, True, Measured(1.0, 0.5, 1.5, "planted"))
    neg = NegativeResult("x in y's place", "why", {"subject": Subject("none", {"k": 1})}, {"lr": 5.0}, (yes,))
    record = ReproductionRecord("t", "cpu", (yes,), 1.0, "2026-01-01T00:00:00+00:00", None, "cpu", "s", "p", "c",
                                "proto", "d", ("r1",), "check", (neg,))
    back = ReproductionRecord.from_json(record.to_json().encode(), "x.json")
    assert back == record and back.verdict == CANNOT_FAIL and back.kind == "check"
    old = json.loads(record.to_json())
    old.update(version=1)
    for key in ("kind", "negatives", "own_verdict"):
        del old[key]
    legacy = ReproductionRecord.from_json(json.dumps(old).encode(), "old.json")
    assert legacy.kind == "reproduction" and legacy.negatives is None and legacy.verdict == REPRODUCED
    for change, message in (({"kind": "claim"}, "kind is not one of"), ({"negatives": {}}, "negatives is not a list"),
                            ({"negatives": [{"label": "x", "why": "y", "swaps": {"s": 3}, "settings": {},
                                             "checks": []}]}, "not a subject")):
        with pytest.raises(MixbenchError, match=message):
            ReproductionRecord.from_json(json.dumps({**json.loads(record.to_json()), **change}).encode(), "b.json")


def test_a_target_must_subclass_target_with_a_known_kind():
    from harness.registry import register_target
    from harness.reproduction import Target

    class Typo(Target):
        kind = "reproducton"

    with pytest.raises(TypeError, match="kinds: reproduction, check"):
        register_target("typo-kind")(Typo)
    with pytest.raises(TypeError, match="must subclass harness.reproduction.Target"):
        register_target("not-a-target")(object)
    assert "typo-kind" not in TARGETS.names() and "not-a-target" not in TARGETS.names()


def test_the_listing_puts_the_harness_checks_apart_and_names_each_negative(capsys):
    from tests.conftest import main

    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    claims, checks = out.split("== Checks of this harness")
    assert claims.startswith("== Reproductions of published claims ==")
    assert "\ncontrols\n" in checks and "\nleading-terms\n" in checks and "\nzoology-mqar\n" in claims
    assert "\ncontrols\n" not in claims
    assert "negatives:  learning rate 5 in place of 0.5" in checks


def _mqar_run(store, mixer: str, accuracies: dict[tuple[int, int], float], n: int = 400) -> str:
    """A planted synthetic run of ``mixer`` with MQAR accuracy per setting: per-example 0/1 items (the first
    ``acc x n`` correct) and a Wilson interval, as the suite stores them."""
    from harness import stats

    metrics = []
    for (length, pairs), acc in accuracies.items():
        k = round(acc * n)
        items = {f"ex{i}": float(i < k) for i in range(n)}
        metric = score(f"mqar/seq{length}_kv{pairs}_vocab256/acc", k / n, True, items=items)
        metrics.append(dataclasses.replace(metric, interval=stats.wilson_interval(k, n)))
    return put(store, manifest("synthetic", subject(mixer, preset="quick")), metrics)


@pytest.mark.parametrize("case, expected", [
    # attention solves both; mamba learned (64, 4) and falls at (128, 8): the claim, reproduced
    ({"attention": (0.98, 0.97), "mamba": (0.95, 0.40)}, REPRODUCED),
    # the reviewer's case: mamba never learned (64, 4) (0.256): its "failure" at (128, 8) shows nothing
    ({"attention": (0.98, 0.97), "mamba": (0.256, 0.126)}, INCONCLUSIVE),
    # a planted attention that does not recall at (128, 8) breaks the claim
    ({"attention": (0.98, 0.50), "mamba": (0.95, 0.40)}, NOT_REPRODUCED),
    # a fixed-state mixer that solves both settings used to count as support ("solves it too"): it shows nothing
    ({"attention": (0.98, 0.97), "deltanet": (0.99, 0.99)}, INCONCLUSIVE),
    # ... and beside one that falls, the one that falls decides
    ({"attention": (0.98, 0.97), "deltanet": (0.99, 0.99), "protot": (0.96, 0.65)}, REPRODUCED),
])
def test_zoology_mqar_counts_only_fixed_state_mixers_that_learned_the_easy_setting(tmp_path, case, expected):
    target = TARGETS.get("zoology-mqar").cls()
    store = ResultsStore(tmp_path)
    ids = [_mqar_run(store, m, {(64, 4): easy, (128, 8): hard}) for m, (easy, hard) in case.items()]
    assert overall(target.checks(RunIndex(store, ids), "cpu")) == expected
    negative = target.negative_target(target.negatives("cpu")[0])  # mamba in attention's place never passes
    assert overall(negative.checks(RunIndex(store, ids), "cpu")) != REPRODUCED


@pytest.mark.parametrize("drop, gap, expected", [
    (-0.3, 0.03, INCONCLUSIVE),  # every mask check passes, but the mixer barely matters: any mask leaves ppl flat
    (-0.3, 0.3, REPRODUCED),
    (0.0, 0.3, NOT_REPRODUCED),  # a planted prototype whose mask does not remove its word breaks the claim
])
def test_protot_intervention_needs_the_mixer_to_matter_and_the_mask_to_act(tmp_path, drop, gap, expected):
    """Planted interpretability and perplexity runs: the target prototype's mask changes its word's probability
    by ``drop`` per prompt, and `none` is ``gap`` nats worse than protot; the negative (a random prototype against
    the neutral one) never passes."""
    target = TARGETS.get("protot-intervention").cls()
    prompts = {f"{w}:{t}": drop - 0.01 * (w % 3) for w in range(20) for t in (3, 9)}
    random = {k: -0.02 - 0.01 * (i % 3) for i, k in enumerate(prompts)}
    neutral = {k: v + 0.01 for k, v in random.items()}
    store = ResultsStore(tmp_path)
    interp = [score("coherence", 0.3, True, 0.02), score("coherence_random", 0.2, True, 0.02),
              score("dppl_interval/target", 0.001, False, 0.002)]
    for role, items in (("target", prompts), ("random", random), ("neutral", neutral)):
        interp.append(score(f"dprob_interval/{role}", float(np.mean(list(items.values()))), False, 0.02,
                            items=items))
    docs = {f"doc{i}": 5.0 + 0.1 * (i % 4) for i in range(30)}
    ids = [put(store, manifest("interpretability", subject("protot", preset="quick")), interp),
           put(store, manifest("perplexity", subject("protot", preset="quick")),
               [score("ppl", 5.0, False, 0.1, items=docs)]),
           put(store, manifest("perplexity", control("none", preset="quick")),
               [score("ppl", 5.0 + gap, False, 0.1, items={k: v + gap for k, v in docs.items()})])]
    assert overall(target.checks(RunIndex(store, ids), "cpu")) == expected
    negative = target.negative_target(target.negatives("cpu")[0])
    assert overall(negative.checks(RunIndex(store, ids), "cpu")) != REPRODUCED  # random ~ neutral


@pytest.mark.parametrize("gaps, expected", [
    ({"attention": -0.07, "mamba": -0.56, "deltanet": -0.44, "protot": -0.23}, REPRODUCED),
    # a planted mamba that does no better than the control breaks the claim
    ({"attention": -0.07, "mamba": +0.05, "deltanet": -0.44, "protot": -0.23}, NOT_REPRODUCED),
])
def test_controls_follows_each_mixers_paired_gap_and_its_negative_never_passes(tmp_path, gaps, expected):
    """The controls check on planted perplexity runs (NLL per document, the control's plus a gap): one mixer no
    better than `none` fails it; the negative (`none` in attention's place) differs from itself by exactly 0, so
    it cannot come out reproduced."""
    target = TARGETS.get("controls").cls()
    store = ResultsStore(tmp_path)
    docs = {f"doc{i}": 5.0 + 0.1 * (i % 5) for i in range(30)}
    ids = [put(store, manifest("perplexity", control("none", preset="quick")), [score("ppl", 5.2, False, 0.1,
                                                                                      items=docs)])]
    for mixer, gap in gaps.items():
        items = {k: v + gap + 0.01 * (i % 3) for i, (k, v) in enumerate(docs.items())}
        ids.append(put(store, manifest("perplexity", subject(mixer, preset="quick")),
                       [score("ppl", 5.2 + gap, False, 0.1, items=items)]))
    assert overall(target.checks(RunIndex(store, ids), "cpu")) == expected
    negative = target.negative_target(target.negatives("cpu")[0])
    assert overall(negative.checks(RunIndex(store, ids), "cpu")) != REPRODUCED


@pytest.mark.parametrize("cosines, expected", [
    ({"wo": 0.99999, "v": 0.99999, "w": 0.9999, "p": 0.9996}, REPRODUCED),
    ({"wo": 0.99999, "v": 0.99999, "w": 0.9999, "p": 0.980}, NOT_REPRODUCED),  # P leaves its leading term
])
def test_leading_terms_needs_every_matrix_above_the_threshold(tmp_path, cosines, expected):
    target = TARGETS.get("leading-terms").cls()
    store = ResultsStore(tmp_path)
    rid = put(store, manifest("interpretability", subject("attention")),
              [score(f"toy_cos_{k}_min", v) for k, v in cosines.items()])
    assert overall(target.checks(RunIndex(store, [rid]), "cpu")) == expected
