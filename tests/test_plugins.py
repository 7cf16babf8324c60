"""An out-of-tree mixer, written into a temporary package, trained and scored through the real CLI.

Nothing in this repository is edited: the package lives in a temporary folder on PYTHONPATH and is found
either through an entry point (a ``.dist-info`` folder with ``entry_points.txt``, exactly what ``pip install``
of a package declaring ``[project.entry-points."mixbench.mixers"]`` leaves behind) or through ``--plugin``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY_TRAIN

SHIFT_MIXER = '''
"""A previous-token mixer: y_t = W x_(t-1) (+ a learned gate). Causal, O(1) state: the last input."""
from dataclasses import dataclass
import torch
from harness import Mixer, register_mixer


@dataclass(frozen=True)
class ShiftConfig:
    gate_init: float = 0.5


@register_mixer("{name}", config=ShiftConfig)
class ShiftMixer(Mixer):
    kernels = ("reference",)

    def __init__(self, cfg, d_model, layer_idx, n_layers):
        super().__init__(cfg, d_model, layer_idx, n_layers)
        self.proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.gate = torch.nn.Parameter(torch.tensor(cfg.gate_init))

    def forward(self, x, state=None):
        prev = state["last"][:, None] if state is not None else x.new_zeros(x.shape[0], 1, x.shape[2])
        shifted = torch.cat([prev, x[:, :-1]], dim=1)
        y = self.gate * self.proj(shifted)
        return y, (None if state is None else {{"last": x[:, -1]}})

    def init_state(self, batch_size, device, dtype):
        return {{"last": torch.zeros(batch_size, self.d_model, device=device, dtype=dtype)}}

    def step(self, x_t, state):
        y, state = self.forward(x_t[:, None], state)
        return y[:, 0], state

    def state_size(self, seq_len):
        return self.d_model
'''


def write_package(root: Path, package: str, mixer_name: str, entry_point: bool) -> None:
    pkg = root / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "shift.py").write_text(SHIFT_MIXER.replace("{name}", mixer_name).replace("{{", "{").replace("}}", "}"))
    if entry_point:
        info = root / f"{package}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[mixbench.mixers]\n{mixer_name} = {package}.shift\n")


def mixbench(args: list[str], pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("how", ["entry-point", "--plugin"])
def test_out_of_tree_mixer_trains_and_scores(how, tmp_path):
    site = tmp_path / "site"
    name = "shift-ep" if how == "entry-point" else "shift-plugin"
    package = "extmix_ep" if how == "entry-point" else "extmix_plugin"
    write_package(site, package, name, entry_point=how == "entry-point")
    plugin = [] if how == "entry-point" else ["--plugin", f"{package}.shift"]

    listed = mixbench(["mixers", *plugin], site, tmp_path)
    assert listed.returncode == 0 and name in listed.stdout and f"{package}.shift.ShiftMixer" in listed.stdout
    check = mixbench(["check", name, *plugin], site, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    train = mixbench(["train", "--mixer", name, "--out", "ck", *TINY_TRAIN, *plugin], site, tmp_path)
    assert train.returncode == 0, train.stderr
    if plugin:  # the checkpoint names its plugin: without --plugin, say which module to load
        missing = mixbench(["eval", "--suite", "perplexity", "--checkpoint", "ck"], site, tmp_path)
        assert missing.returncode == 2 and f"--plugin {package}.shift" in missing.stderr
        assert "Did you mean" not in missing.stderr
    score = mixbench(["eval", "--suite", "perplexity", "--checkpoint", "ck", "--no-progress", "--suite-config",
                      "max_windows=16", "bootstrap=100", *plugin], site, tmp_path)  # 16 windows: seconds, not a minute
    assert score.returncode == 0, score.stderr
    board = mixbench(["leaderboard", "--format", "json", "--all"], site, tmp_path)
    rows = json.loads(board.stdout)["rows"]
    (ppl,) = [c for k, c in rows[0]["cells"].items() if k.startswith("perplexity") and k.endswith("/ppl")]
    assert [r["mixer"] for r in rows] == [name] and ppl["value"] > 1  # a column labelled with its config
    assert rows[0]["gate"] == "passed"
    # it declares no flops_per_token: its training FLOPs are the 2-per-weight estimate, and say so
    assert rows[0]["train_flops"] > 0 and rows[0]["train_flops_estimated"] is True
    if plugin:
        table = mixbench(["mixers", "--table", "tiny", *plugin], site, tmp_path)
        (line,) = [line for line in table.stdout.splitlines() if line.startswith(f"| {name} |")]
        assert line.split(" | ")[3].endswith("~") and "A trailing ~ marks an estimate" in table.stdout


def test_plugin_beside_the_user_is_found_without_pythonpath(tmp_path):
    """A new user's module in the working folder is found by the ``mixbench`` script itself (which, unlike
    ``python -m``, does not put the working folder on the path): no PYTHONPATH=. needed."""
    write_package(tmp_path, "mymix", "shift-here", entry_point=False)
    script = Path(sys.executable).with_name("mixbench")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([str(script), "mixers", "--plugin", "mymix.shift"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "shift-here" in result.stdout


def test_plugin_that_is_missing_fails_clearly(tmp_path):
    result = mixbench(["mixers", "--plugin", "no_such_pkg.mod"], tmp_path, tmp_path)
    assert result.returncode == 2
    assert "--plugin no_such_pkg.mod: module not found" in result.stderr


def test_unknown_mixer_lists_registered_names(tmp_path):
    result = mixbench(["check", "atention"], tmp_path, tmp_path)
    assert result.returncode == 2
    assert "Did you mean 'attention'?" in result.stderr and "protot" in result.stderr
    assert result.stderr.count("\n") == 1
