"""The conformance gate (every built-in passing it: tests/test_mixer_contract.py): adversarial out-of-tree mixers
(tests/adversaries.py) each fail with the right check named and located; eval/run refuse them and leave the
store untouched; registration is explicit."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import tests.adversaries as adv
from harness.model.conformance import GateConfig, default_lengths, run_checks
from harness.errors import MixbenchError
from harness.registry import MIXERS, register_mixer
from tests.conftest import main



@pytest.mark.parametrize("name", ["_adv_honest", "_adv_order_noise"])
def test_the_honest_out_of_tree_mixers_pass(name):
    """_adv_order_noise differs across lengths by what fp32 sums in another order give (GLA's chunk kernel at
    preset quick: 1.55e-6 between a 1-token prefix and 13 tokens); the old gate called that a causality failure."""
    report = run_checks(name)
    assert report.passed, report.render()


@pytest.mark.parametrize("name", sorted(adv.EXPECTED))
def test_each_adversary_fails_with_its_check_named(name):
    report = run_checks(name)
    failed = {r.name: r for r in report.results if not r.passed}
    expected = adv.EXPECTED[name]
    assert not report.passed and expected in failed, report.render()
    text = report.render()
    assert "FAIL" in text and "usually:" in text and "Traceback" not in text
    result = failed[expected]
    if name in ("_adv_nan_step", "_adv_nan_forward"):
        assert "non-finite" in result.detail and result.location is not None
    if name == "_adv_chunk_leak":  # position 63 reads position 64: the location says so
        assert result.location.position == 63 and result.location.length > 64, text
    if name == "_adv_leak_past_40":
        assert result.location.length > 40
    if name == "_adv_bare_tensor":
        assert "a bare tensor" in result.detail and "(y, state)" in result.detail
        assert all(r.skipped for r in report.results[1:])  # nothing else is run on a broken contract
    if name == "_adv_wrong_width":
        assert "shape" in result.detail and "(must be equal)" in result.detail
    if name == "_adv_inplace_state":  # its outputs are all right: decode and prefill fail on the state alone
        assert "in place" in result.detail and "in place" in failed["prefill"].detail
        assert {"causality", "determinism", "state_size"} <= {r.name for r in report.results if r.passed}


def test_a_leak_only_past_40_tokens_hides_from_a_single_short_length():
    """The old gate ran at 37 tokens only: there the causality check cannot see the leak, which is why the
    default runs many lengths up to (twice) the context."""
    short = run_checks("_adv_leak_past_40", config=GateConfig(lengths=(37,), batch_sizes=(2,)))
    assert next(r for r in short.results if r.name == "causality").passed
    default = run_checks("_adv_leak_past_40")
    assert not next(r for r in default.results if r.name == "causality").passed


def test_check_cli_takes_lengths_batch_sizes_and_tolerance(capsys):
    assert main(["check", "_adv_honest", "--plugin", "tests.adversaries", "--lengths", "5,70",
                 "--batch-sizes", "2", "--tolerance", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "lengths 5, 70; batch sizes 2" in out and "tolerance 1e-03" in out
    assert main(["check", "_adv_leak_past_40", "--plugin", "tests.adversaries"]) == 1
    assert main(["check", "_adv_honest", "--plugin", "tests.adversaries", "--lengths", "0"]) == 2
    assert "lengths must be positive" in capsys.readouterr().err


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    if root.exists():
        for p in sorted(root.rglob("*")):
            h.update(str(p.relative_to(root)).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


# (_adv_nan_forward cannot even be trained: training stops at its NaN loss)
@pytest.mark.parametrize("name", ["_adv_leak_past_40", "_adv_nan_step", "_adv_batch_coupled", "_adv_train_leak",
                                  "_adv_chunk_leak"])
def test_eval_refuses_a_failing_mixer_and_leaves_the_store_untouched(name, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    assert main(["train", "--plugin", "tests.adversaries", "--mixer", name, "--out", str(ckpt), "--preset", "tiny",
                 "--tokens", "2048", "--max-train-docs", "20", "--no-progress"]) == 0
    store = tmp_path / "store"
    store.mkdir()
    before = _tree_digest(store)
    capsys.readouterr()
    code = main(["eval", "--plugin", "tests.adversaries", "--suite", "perplexity", "--checkpoint", str(ckpt),
                 "--results", str(store), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and f"mixbench check {name}" in err and "fails the conformance gate" in err
    assert adv.EXPECTED[name] in err and err.count("\n") == 1  # one sentence, no traceback
    assert _tree_digest(store) == before


def test_skip_gate_scores_anyway_and_says_so(tmp_path):
    from harness.store.results import ResultsStore

    ckpt = tmp_path / "ckpt"
    main(["train", "--plugin", "tests.adversaries", "--mixer", "_adv_batch_coupled", "--out", str(ckpt), "--preset",
          "tiny", "--tokens", "2048", "--max-train-docs", "20", "--no-progress"])
    assert main(["eval", "--plugin", "tests.adversaries", "--suite", "perplexity", "--checkpoint", str(ckpt),
                 "--results", str(tmp_path / "store"), "--skip-gate", "--no-progress",
                 "--suite-config", "max_windows=4"]) == 0
    (run,) = ResultsStore(tmp_path / "store").iter_runs()
    assert run.manifest.gate.status == "skipped"


def test_registering_an_existing_name_needs_override():
    with pytest.raises(MixbenchError, match=r"'attention' is registered by mixers.attention.layer.Attention and again by "
                                            r"\S*test_conformance\S*Impostor; .*override=True"):
        @register_mixer("attention")
        class Impostor(adv.Honest):  # noqa: F841
            pass
    original = MIXERS.get("attention")

    @register_mixer("attention", override=True)
    class Replacement(adv.Honest):
        pass

    try:
        assert MIXERS.get("attention").cls is Replacement
    finally:
        MIXERS._entries["attention"] = original


def test_default_lengths_stay_within_the_memory_bound():
    from harness.model.backbone import build_model
    from harness.config import BackboneConfig, ModelSpec

    model = build_model(ModelSpec("protot", {}, BackboneConfig(64, 2, 128, 512)), seed=0)
    assert max(default_lengths(model, max_tokens=300, batch=3)) <= 100
