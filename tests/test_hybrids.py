"""Hybrid stacks (docs/hybrids.md): ``hybrid:<pattern>`` builds each layer as the registered mixer the pattern
names there. A hybrid decodes as it runs forward; its state and FLOPs are its layers' sums; a planted broken part
(a plugin that reads the future, beside a built-in) is caught by the gate naming that layer and part; the pattern
and every part's code are in the identity; an exported hybrid loads in transformers with equal logits; a bad
pattern is one sentence."""

from __future__ import annotations

import json
import shlex

import pytest
import torch

import tests.adversaries  # noqa: F401 - registers the _adv_* plugin mixers
from harness.cli import build_parser, main
from harness.config import BackboneConfig, ModelSpec, get_preset
from harness.errors import ConfigError, MixbenchError
from harness.model.backbone import build_model
from harness.model.flops import model_flops_per_token
from harness.registry import MIXERS

BACKBONE = BackboneConfig(vocab_size=97, d_model=32, n_layers=4, context=48)


def _model(pattern: str, config: dict | None = None, backbone: BackboneConfig = BACKBONE):
    return build_model(ModelSpec(pattern, dict(config or {}), backbone), seed=0).eval()


def test_layers_follow_the_pattern_and_keep_their_own_configs():
    """~0.1 s."""
    model = _model("hybrid:deltanet*3+attention", {"parts": '{"attention": {"n_heads": 2}}'})
    names = [m.name for m in model.mixers]
    assert names == ["deltanet", "deltanet", "deltanet", "attention"]
    assert model.mixers[3].cfg.n_heads == 2 and [m.layer_idx for m in model.mixers] == [0, 1, 2, 3]
    # the period repeats over the depth; a period as long as the depth is an explicit per-layer list
    deep = _model("hybrid:attention+deltanet", backbone=BackboneConfig(vocab_size=97, d_model=32, n_layers=4,
                                                                        context=48))
    assert [m.name for m in deep.mixers] == ["attention", "deltanet"] * 2
    listed = _model("hybrid:deltanet+attention+deltanet+deltanet")
    assert [m.name for m in listed.mixers] == ["deltanet", "attention", "deltanet", "deltanet"]


def test_decode_equals_the_full_forward():
    """A prefill then one step per token gives the logits of one forward pass over the whole text (~0.5 s)."""
    model = _model("hybrid:gated-deltanet*3+attention")
    ids = torch.randint(0, 97, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = model(ids)
        logits, states = model(ids[:, :7], model.init_states(2))
        steps = [logits]
        for t in range(7, 30):
            step, states = model.step(ids[:, t], states)
            steps.append(step[:, None])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=2e-5)


def test_state_and_flops_are_the_sums_of_the_layers():
    """Against each part built alone as a one-mixer model of the same width (~0.2 s)."""
    model = _model("hybrid:deltanet*3+attention")
    alone = {name: _model(name).mixers[0] for name in ("deltanet", "attention")}
    for T in (0, 48, 100):
        assert model.state_size(T) == 3 * alone["deltanet"].state_size(T) + alone["attention"].state_size(T)
    assert model.state_size(100) > model.state_size(48)  # attention's KV cache grows
    dn, at = (alone[n].flops_per_token(48) for n in ("deltanet", "attention"))
    d, ffn = BACKBONE.d_model, BACKBONE.ffn_dim
    forward = 2 * 97 * d + 4 * 6 * d * ffn + 3 * dn.forward + at.forward  # head, 4 MLPs, 3 + 1 mixers (docs/flops.md)
    got = model_flops_per_token(model, 48)
    assert got.forward == pytest.approx(forward, rel=1e-12)
    assert got.backward == pytest.approx(2 * (2 * 97 * d + 4 * 6 * d * ffn) + 3 * dn.backward + at.backward, rel=1e-12)


def test_the_gate_names_a_planted_broken_layer_and_its_part(tmp_path, monkeypatch):
    """A plugin that reads the next token (past 40 tokens) as layer 1 beside attention: the gate fails it at
    layer 1 and names the part, in the report and in the refusal ``eval``/``run`` print (~1.5 s)."""
    from harness.model.conformance import GateConfig, run_checks
    from harness.model.gate import GateFailed, require_gate

    monkeypatch.setenv("MIXBENCH_CACHE", str(tmp_path))
    config = GateConfig(lengths=(5, 70))
    report = run_checks("hybrid:attention+_adv_leak_past_40", "tiny", config=config)
    causality = next(r for r in report.results if r.name == "causality")
    assert not causality.passed and causality.location.layer == 1
    assert "at layer 1 (_adv_leak_past_40)" in report.render()
    assert report.failures()[0].startswith("causality at layer 1 (_adv_leak_past_40)")
    stack = next(r for r in report.results if r.name == "stack")
    assert not stack.passed  # the whole stack reads the future too
    # at a backbone other than the preset's, the suggested `mixbench check` says it (a hybrid's depth would be
    # refused without it); the command (shell-quoted: a pattern may hold a '*') parses back to both
    backbone = BackboneConfig(vocab_size=512, d_model=32, n_layers=2, context=128)
    with pytest.raises(GateFailed, match=r"causality at layer 1 \(_adv_leak_past_40\)") as info:
        require_gate(ModelSpec("hybrid:attention+_adv_leak_past_40", {}, backbone), "tiny", config=config,
                     progress=False)
    hint = str(info.value).split("run `")[1].split("`")[0]
    assert hint.startswith("mixbench check hybrid:attention+_adv_leak_past_40 --preset tiny")
    args = build_parser().parse_args(shlex.split(hint)[1:])
    assert args.mixer == "hybrid:attention+_adv_leak_past_40" and args.backbone == ["d_model=32"]
    # the same plugin honest beside the same built-in passes, the stack check included (not skipped)
    honest = run_checks("hybrid:attention+_adv_honest", "tiny", config=config)
    assert honest.passed, honest.render()
    assert not next(r for r in honest.results if r.name == "stack").skipped


def test_the_identity_holds_the_pattern_and_every_part_s_code(monkeypatch):
    """~0.1 s: the pattern, a part's config and a part's code each change the identity; the hybrid's own module
    does not import its parts, so only the parts' entries can carry their code."""
    from harness.store import identity

    def ident(name, config=None):
        return identity.mixer_identity(name, config).id

    base = ident("hybrid:deltanet*3+attention")
    assert base != ident("hybrid:deltanet+attention")
    assert base != ident("hybrid:attention+deltanet*3")
    assert base != ident("hybrid:deltanet*3+attention", {"parts": {"deltanet": {"num_heads": 2}}})
    # a config that spells out a default is the same model
    assert base == ident("hybrid:deltanet*3+attention", {"parts": '{"attention": {"n_heads": 4}}'})
    deltanet_module = MIXERS.get("deltanet").cls.__module__
    real = identity.plugin_fingerprint
    monkeypatch.setattr(identity, "plugin_fingerprint",
                        lambda cls: "edited" if cls.__module__ == deltanet_module else real(cls))
    assert ident("hybrid:deltanet*3+attention") != base  # editing DeltaNet's code invalidates the hybrid
    assert ident("hybrid:gla+attention") == identity.mixer_identity("hybrid:gla+attention", None).id
    # a part's code change is the same lineage (newer code), not another board row
    monkeypatch.setattr(identity, "plugin_fingerprint", real)
    parts = identity.mixer_identity("hybrid:deltanet*3+attention", None).parts
    edited = json.loads(json.dumps(parts))
    edited["mixer_parts"][0]["mixer_code"] = "edited"
    assert identity.lineage_identity({"mixer": parts}) == identity.lineage_identity({"mixer": edited})


@pytest.mark.parametrize("pattern, message", [
    ("hybrid:", "empty pattern"),
    ("hybrid:deltanet++attention", "part 2 is empty"),
    ("hybrid:deltanet*0+attention", "positive whole number"),
    ("hybrid:deltanet*x", "positive whole number"),
    ("hybrid:deltanet*3+atention", "unknown mixer 'atention'. Did you mean 'attention'?"),
    ("hybrid:hybrid:deltanet", "cannot contain a hybrid"),
])
def test_a_bad_pattern_is_one_sentence(pattern, message):
    """~0 s each."""
    with pytest.raises(MixbenchError, match=message.replace("(", r"\(").replace("?", r"\?")) as info:
        MIXERS.get(pattern)
    assert "\n" not in str(info.value)


def test_a_depth_off_the_period_and_an_unknown_part_config_are_one_sentence():
    """make_run_spec builds the model on meta, so both are found before anything runs (~0.1 s)."""
    from harness.model.specs import make_run_spec

    with pytest.raises(ConfigError, match=r"repeats a period of 4 layers over the depth, but the model has 2; use a "
                                          r"depth that is a multiple of 4"):
        make_run_spec("hybrid:deltanet*3+attention", "tiny")
    assert make_run_spec("hybrid:deltanet*3+attention", "tiny", backbone_overrides={"n_layers": 4})
    with pytest.raises(ConfigError, match="parts configures gla, which the pattern does not hold"):
        make_run_spec("hybrid:deltanet+attention", "tiny", {"parts": '{"gla": {}}'})
    with pytest.raises(ConfigError, match="unknown config field"):
        make_run_spec("hybrid:deltanet+attention", "tiny", {"parts": '{"deltanet": {"heads": 2}}'})


def test_the_cli_and_a_plan_name_a_hybrid_and_its_depth(capsys):
    """``check`` at the preset's 2 layers refuses a period of 4 in one sentence; a plan names the pattern with its
    parts' configs and the depth in its backbone, and is refused, located, without it (~0.3 s)."""
    from harness.running.plan import plan_from_dict

    assert main(["check", "hybrid:deltanet*3+attention", "--preset", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "use a depth that is a multiple of 4 (--backbone n_layers=N" in err and err.count("\n") == 1
    raw = {"name": "h", "preset": "tiny", "suites": ["perplexity"], "backbone": {"n_layers": 4},
           "mixers": {"hybrid:deltanet*3+attention": {"parts": {"attention": {"n_heads": 2}}}, "deltanet": None}}
    plan = plan_from_dict(raw)
    plan.check()
    assert plan.mixer_configs["hybrid:deltanet*3+attention"] == {"parts": {"attention": {"n_heads": 2}}}
    with pytest.raises(ConfigError, match=r"mixer hybrid:deltanet\*3\+attention.*multiple of 4"):
        plan_from_dict({**raw, "backbone": {}}).check()


def test_matching_sizes_the_whole_stack_and_the_board_labels_it_by_its_pattern():
    """A hybrid's non-embedding parameters are its layers' (3/4 of a 4-layer DeltaNet model's plus 1/4 of an
    attention model's, the MLPs and norms shared alike), and matching brings that within 5% of the reference;
    the board's label is the pattern, a part's config difference named part by part (~0.3 s)."""
    import dataclasses

    from harness.model.matching import MATCH_TOLERANCE, non_embedding_parameters, relative_gap
    from harness.model.specs import make_run_spec
    from harness.running.evaluate import mixer_subject
    from harness.store.identity import mixer_identity

    pattern, four = "hybrid:deltanet*3+attention", {"n_layers": 4}
    unmatched = make_run_spec(pattern, "tiny", backbone_overrides=four, match="none").model
    count = {n: non_embedding_parameters(ModelSpec(n, {}, unmatched.backbone)) for n in ("deltanet", "attention")}
    assert 4 * non_embedding_parameters(unmatched) == 3 * count["deltanet"] + count["attention"]
    matched = make_run_spec(pattern, "tiny", backbone_overrides=four).model
    assert matched.backbone.ffn_dim != unmatched.backbone.ffn_dim
    assert abs(relative_gap(matched, get_preset("tiny").match_reference)) < MATCH_TOLERANCE
    assert dataclasses.replace(matched.backbone, ffn_hidden=0) == dataclasses.replace(unmatched.backbone,
                                                                                      ffn_hidden=0)

    def label(config):
        return mixer_subject(pattern, config, mixer_identity(pattern, config)).label

    assert label({}) == pattern == label({"parts": {"attention": {"n_heads": 4}}})  # the default spelt out
    assert label({"parts": {"attention": {"n_heads": 2}, "deltanet": {"use_gate": True}}}) == \
        f"{pattern} (attention.n_heads=2, deltanet.use_gate=True)"


def test_an_exported_hybrid_with_a_plugin_part_loads_in_transformers_with_equal_logits(tmp_path):
    """A plugin part beside a built-in, untrained at preset tiny: the folder names the part's module and every
    part's code, and transformers' model gives mixbench's logits and greedy decode (~3 s)."""
    from harness.corpus.tokenizer import train_bpe
    from harness.hf.export import export_checkpoint
    from harness.model.checkpoint import load_model, save_checkpoint
    from harness.model.specs import bind_vocab, make_run_spec
    from transformers import AutoModelForCausalLM

    texts = [f"call me Ishmael {i}: some years ago, never mind how long precisely." for i in range(50)]
    tokenizer = tmp_path / "tokenizer.json"
    train_bpe(texts, 512, tmp_path / "bpe").save(tokenizer)
    pattern = "hybrid:_adv_honest+attention"
    spec = bind_vocab(make_run_spec(pattern, "tiny", {"parts": {"_adv_honest": {"decay": 0.5}}}), 512)
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, spec, build_model(spec.model, seed=1), 0, {"final": True}, tokenizer, None)
    export_checkpoint(ckpt, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["mixer"] == pattern and config["mixbench_part_plugins"] == [{"module": "tests.adversaries"}]
    assert {"part_code:_adv_honest", "part_code:attention"} <= set(config["mixbench_code"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    assert [m.name for m in hf.model.mixers] == ["_adv_honest", "attention"] and hf.model.mixers[0].cfg.decay == 0.5
    ours, _ = load_model(ckpt)
    ids = torch.randint(2, 512, (2, 23), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids)[0], rtol=0, atol=1e-5)
    prompt = ids[:1, :9]
    out = hf.generate(prompt, max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert torch.equal(out, ours.generate(prompt, 6, temperature=0))


def test_suites_that_build_their_own_models_give_a_hybrid_whole_periods(tmp_path):
    """The reference board's hybrid failed two suites: the synthetic suite trains 2-layer models (a period of 4
    does not fit; it now trains 4) and interpretability gave the untrained twin of a hybrid the first layer's kernel
    in every layer (attention has no 'chunk'; each layer now keeps its own)."""
    from types import SimpleNamespace

    from harness.suite import SuiteContext
    from harness.registry import SUITES

    name = "hybrid:deltanet*3+attention"
    entry = SUITES.get("synthetic")
    suite = entry.cls(entry.make_config({
        "tasks": ("mqar",), "settings": "mqar:seq_len=16,num_kv_pairs=2,vocab_size=64,num_train_examples=64",
        "d_model": 16, "max_steps": 2, "eval_every": 2, "lrs": (3e-3,), "valid_examples": 8, "test_examples": 8,
        "extrapolation": ()}))
    result = suite.run_mixer(name, {}, SuiteContext(None, tmp_path, seed=0, progress=False))
    (state,) = [m for m in result.metrics if m.name.endswith("/state_floats")]
    four = build_model(ModelSpec(name, {}, BackboneConfig(16, 4, 16, 64)))
    assert state.value == four.state_size(16)  # four layers: three DeltaNet states and one KV cache

    from suites.interpretability.suite import _Run

    four.set_kernel(None, torch.device("cpu"))
    kernels = [m.kernel for m in four.mixers]
    assert len(set(kernels)) == 2  # DeltaNet's and attention's own defaults
    twin = _Run._init_model(SimpleNamespace(model=four, ctx=SimpleNamespace(seed=0), device="cpu"))
    assert [m.kernel for m in twin.mixers] == kernels
