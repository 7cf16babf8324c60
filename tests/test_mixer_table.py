"""``mixbench mixers --table``: the per-mixer cost table of docs/mixers.md, from the mixer contract alone."""

from __future__ import annotations

import torch

from harness.config import get_preset
from harness.registry import MIXERS
from harness.reporting.mixer_table import ESTIMATED, LEGEND, mixer_costs, render


def test_every_mixer_has_a_row_with_its_own_declared_numbers():
    rows = {r.name: r for r in mixer_costs("tiny")}
    builtin = {e.name for e in MIXERS.entries() if ":" not in e.name}
    assert builtin <= set(rows)
    backbone = get_preset("tiny").backbone
    for name in ("attention", "none", "gla"):
        entry = MIXERS.get(name)
        torch.manual_seed(0)
        mixer = entry.cls(entry.make_config({}), backbone["d_model"], 1, backbone["n_layers"])
        row = rows[name]
        assert row.state_floats == mixer.state_size(backbone["context"])
        assert row.flops_forward == mixer.flops_per_token(backbone["context"]).forward
    assert rows["attention"].state_grows and not rows["gla"].state_grows and rows["none"].state_floats == 0
    assert rows["gla"].cpu_default == "chunk" and rows["gla"].cuda_default == "triton"
    table = render(list(rows.values()), "tiny")
    assert table.count("\n| ") == len(rows) + 1 and "Gated Linear Attention" in table
    # every built-in counts its own FLOPs: no estimate to mark (a plugin's is marked, tests/test_cli_small_fixes.py)
    own = [r.name for r in rows.values() if ":" not in r.name and MIXERS.get(r.name).source.startswith("mixers.")]
    assert own and not [name for name in own if rows[name].flops_estimated]
    own_table = render([rows[name] for name in own], "tiny")  # tests register adversaries that estimate theirs
    assert f"{ESTIMATED} |" not in own_table and LEGEND not in own_table
    for name in ("attention", "mamba", "mamba2", "protot"):  # the paper's four mixers cite theirs
        assert f"| {name} | - |" not in table and rows[name].paper
