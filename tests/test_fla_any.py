"""``--mixer fla:<LayerClass>``: the generic fla adapter (mixers/fla_any), on the layers a CPU can run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.errors import ConfigError, UnknownNameError
from harness.model.conformance import run_checks
from harness.registry import MIXERS

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.filterwarnings("ignore:ShortConvolution is crucial")


def build(name: str, d_model: int = 32, seed: int = 0, **config):
    entry = MIXERS.get(name)
    torch.manual_seed(seed)
    return entry.cls(entry.make_config(config), d_model, 1, 2)


def test_an_adapted_layer_passes_the_gate_on_cpu_through_its_builtin_twins_routes():
    report = run_checks("fla:GatedLinearAttention")
    assert report.passed, report.render()


@pytest.mark.parametrize(("layer", "builtin"), [("GatedLinearAttention", "gla"), ("MultiScaleRetention", "retnet"),
                                                ("DeltaNet", "deltanet")])
def test_the_adapter_computes_what_the_builtin_mixer_computes(layer, builtin):
    """Same constructor arguments (fla's defaults), same seed, same initialisation: the same function, through
    the adapter's generic cache (created by the layer on its first call) and the built-in's declared one."""
    options = {"deltanet": '{"num_heads": 4}', "retnet": '{"num_heads": 4, "mode": "chunk"}'}.get(builtin, "{}")
    adapted = build(f"fla:{layer}", options=options)
    native = build(builtin)
    if builtin == "deltanet":  # the built-in's CPU default is its own chunked kernel; compare on the reference
        adapted.set_kernel("reference"), native.set_kernel("reference")
    x = torch.randn(2, 21, 32)
    with torch.no_grad():
        assert torch.allclose(adapted(x)[0], native(x)[0], atol=1e-6)
        state_a, state_n = adapted.init_state(2, x.device, x.dtype), native.init_state(2, x.device, x.dtype)
        y_a, state_a = adapted(x[:, :9], state_a)
        y_n, state_n = native(x[:, :9], state_n)
        step_a, _ = adapted.step(x[:, 9], state_a)
        step_n, _ = native.step(x[:, 9], state_n)
    assert torch.allclose(step_a, step_n, atol=1e-6)
    assert adapted.state_size(9) == native.state_size(9)  # the same floats, measured vs declared


def test_state_starts_empty_and_is_measured():
    mixer = build("fla:GatedLinearAttention")
    state = mixer.init_state(3, torch.device("cpu"), torch.float32)
    assert set(state) == {"seen"} and mixer.state_size(0) == 0
    assert mixer.state_size(5) == mixer.state_size(50) == 4 * 8 * 4  # O(1) in the length, as GLA's is


def test_names_errors_and_listing():
    with pytest.raises(ConfigError, match="has no layer 'NoSuchLayer'.*GatedLinearAttention"):
        MIXERS.get("fla:NoSuchLayer")
    with pytest.raises(UnknownNameError):
        MIXERS.get("nosuchprefix:GatedLinearAttention")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="runs only on CUDA.*fla:GatedLinearAttention"):
            build("fla:HGRN2Attention")
    with pytest.raises(ConfigError, match="JSON"):
        build("fla:GatedLinearAttention", options="num_heads=4")
    with pytest.raises(ConfigError, match="cannot set hidden_size"):
        build("fla:GatedLinearAttention", options='{"hidden_size": 8}')
    with pytest.raises(ConfigError, match="rejected its arguments"):
        build("fla:GatedLinearAttention", options='{"no_such_argument": 1}')
    entry = MIXERS.get("fla:GatedLinearAttention")
    assert entry.cls.kernels == ("recurrent", "chunk", "triton") and "Gated Linear Attention" in entry.cls.paper


def test_mixbench_mixers_names_the_pattern_the_papers_and_the_fla_version(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "mixers"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, env={**os.environ, "MIXBENCH_CACHE": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fla:<LayerClass>" in out.stdout
    gla = out.stdout[out.stdout.index("\ngla\n"):]
    assert "paper:        Gated Linear Attention" in gla and "flash-linear-attention 0.6" in gla
