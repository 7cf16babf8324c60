"""``mixbench mixers --table``: the per-mixer cost table of docs/mixers.md, from the mixer contract alone."""

from __future__ import annotations

import torch

from harness.config import get_preset
from harness.registry import MIXERS
from harness.reporting.mixer_table import mixer_costs, render


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
