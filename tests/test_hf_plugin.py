"""A model made with a single-file plugin mixer, exported, loads where the plugin is not installed: plain
transformers, lm-eval's `hf` model (the documented command, on a CPU) and `mixbench eval --hf-model` without
--plugin, each in a fresh interpreter whose working folder and path do not hold the plugin; the logits equal
mixbench's. An edited plugin copy is refused (harness/hf/modeling_mixbench.py, ``import_mixer``)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests import adversaries
from tests.conftest import train_tiny

PLUGIN = "hf_plugin_decay"
MIXER = "_hf_plugin_decay"
#: the adversaries' honest recurrence, registered from a file of its own (the plugin's code is that class's)
SOURCE = textwrap.dedent('''
    """A decayed linear recurrence with an exact O(1) step: a plugin that lives in one file."""
    from dataclasses import dataclass

    import torch
    from torch import nn

    from harness import Mixer, register_mixer


''') + inspect.getsource(adversaries.DecayConfig) + "\n\n" + f'@register_mixer("{MIXER}", config=DecayConfig)\n' \
    + inspect.getsource(adversaries.DecayedRecurrence)
IDS = [[5, 17, 99, 3, 250, 41, 8, 77, 120, 6]]
FRESH = textwrap.dedent('''
    import json, sys
    import numpy as np, torch
    folder, out = sys.argv[1], sys.argv[2]
    assert "hf_plugin_decay" not in sys.modules
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # no prompt: stdin is closed
    ids = torch.tensor(json.loads(sys.argv[3]))
    with torch.no_grad():
        plain = model(ids).logits.numpy()
    from lm_eval.models.huggingface import HFLM
    lm = HFLM(pretrained=folder, trust_remote_code=True, device="cpu", dtype="float32")
    with torch.no_grad():
        theirs = lm.model(ids).logits.numpy()
    np.savez(out, plain=plain, lm_eval=theirs, encoded=np.array(tokenizer("Call me Ishmael.")["input_ids"]))
''')


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh interpreter that cannot import the plugin: the project is installed, the
    plugin's folder is on no path, transformers' module cache is new."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HOME=str(tmp_path / "hf-home"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    return env


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin-export")
    plugins = root / "plugins"
    plugins.mkdir()
    (plugins / f"{PLUGIN}.py").write_text(SOURCE)
    sys.path.insert(0, str(plugins))
    try:
        ckpt = train_tiny(root / "ckpt", MIXER, "--plugin", PLUGIN)
        from harness.hf.export import export_checkpoint

        folder = export_checkpoint(ckpt, root / "hf").folder
    finally:
        sys.path.remove(str(plugins))
    return root, ckpt, folder


def test_the_export_carries_the_plugin_file_and_its_hash(exported):
    root, _, folder = exported
    config = json.loads((folder / "config.json").read_text())
    assert config["mixbench_plugin"]["file"] == f"{PLUGIN}.py"
    assert (folder / f"{PLUGIN}.py").read_text() == SOURCE


def test_transformers_and_lm_eval_load_it_in_a_fresh_process_with_mixbenchs_logits(exported, tmp_path):
    from harness.model.checkpoint import load_model

    root, ckpt, folder = exported
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "logits.npz"
    done = subprocess.run([sys.executable, "-c", FRESH, str(folder), str(out), json.dumps(IDS)], cwd=elsewhere,
                          env=_fresh_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    model, _ = load_model(ckpt, "cpu")
    with torch.no_grad():
        ours = model(torch.tensor(IDS))[0].numpy()
    found = np.load(out)
    assert np.abs(found["plain"] - ours).max() < 1e-5 and np.abs(found["lm_eval"] - ours).max() < 1e-5
    assert len(found["encoded"]) > 0


def test_the_documented_lm_eval_command_and_eval_hf_model_run_without_the_plugin(exported, tmp_path):
    """docs/huggingface.md's lm_eval command (--device cpu, the task folder from --include_path) and mixbench's
    own --hf-model route, each a fresh process without --plugin."""
    import suites.lm_eval.model

    root, _, folder = exported
    tasks = Path(suites.lm_eval.model.__file__).parent / "tasks"
    lm_eval = Path(sys.executable).parent / "lm_eval"
    done = subprocess.run([str(lm_eval), "--model", "hf", "--model_args",
                           f"pretrained={folder},trust_remote_code=True,dtype=float32", "--device", "cpu",
                           "--include_path", str(tasks), "--tasks", "standin_sentiment_zeroshot", "--limit", "4"],
                          cwd=tmp_path, env=_fresh_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "standin_sentiment_zeroshot" in done.stdout, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "harness.cli", "eval", "--suite", "perplexity", "--hf-model",
                           str(folder), "--trust-remote-code", "--results", str(tmp_path / "results"),
                           "--suite-config", "max_windows=2", "bootstrap=10", "--no-progress"],
                          cwd=tmp_path, env=_fresh_env(tmp_path), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_an_edited_plugin_copy_is_refused(exported, tmp_path):
    """The copy is checked before it runs: loaded in-process under a module name nothing has imported, an edited
    copy never executes (it would register its mixer)."""
    import shutil

    from harness.hf.modeling_mixbench import MixbenchConfig, import_mixer
    from harness.registry import MIXERS

    _, _, folder = exported
    edited = tmp_path / "edited"
    shutil.copytree(folder, edited)
    config = json.loads((edited / "config.json").read_text())
    plugin = dict(config["mixbench_plugin"], module="hf_plugin_edited", file="hf_plugin_edited.py")
    (edited / "hf_plugin_edited.py").write_text(SOURCE.replace(MIXER, "_hf_plugin_edited").replace("0.8", "0.9"))
    cfg = MixbenchConfig(mixer="_hf_plugin_edited", mixer_source="hf_plugin_edited.DecayedRecurrence",
                         backbone=config["backbone"], mixbench_plugin=plugin)
    cfg._name_or_path = str(edited)
    with pytest.raises(RuntimeError, match="is not the plugin the model was exported with"):
        import_mixer(cfg)
    assert "_hf_plugin_edited" not in MIXERS.names() and "hf_plugin_edited" not in sys.modules
    cfg._name_or_path = str(tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match="which is not installed here and not beside the model"):
        import_mixer(cfg)
