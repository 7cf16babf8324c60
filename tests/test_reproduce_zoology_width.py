"""zoology-width-length (reproductions/zoology_width.py) on planted stores: the verdict follows the width x length
trend of the gated convolution, a subject that breaks the trend is "not reproduced", a gated convolution that
learned nothing leaves it inconclusive, and the target's negative (attention in the gated convolution's place)
fails its claim. No training: the runs are written with chosen accuracies."""

from __future__ import annotations

import pytest

from harness.registry import TARGETS
from harness.reproduction import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, RunIndex, overall
from harness.store.results import ResultsStore
from reproductions.zoology_width import GRIDS
from tests.planted import manifest, put, score, subject

GRID = GRIDS["cpu"]


def plant(tmp_path, accuracies: dict[str, dict[tuple[int, int], float]]) -> RunIndex:
    """One synthetic run per (mixer, width) holding each setting's accuracy (width, length) -> value, with a
    planted interval of +- 0.02; the gated convolution with the target's own config."""
    store = ResultsStore(tmp_path / "store")
    ids = []
    for mixer, cells in accuracies.items():
        config = {"filter_len": 512} if mixer == "baseconv" else {}
        for width in GRID["widths"]:
            metrics = [score(f"mqar/seq{L}_kv{kv}_vocab{GRID['vocab']}/acc", cells[width, L], half=0.02)
                       for L, kv in GRID["settings"]]
            subj = subject(mixer, config=config, code=f"w{width}")
            ids.append(put(store, manifest("synthetic", subj, {"d_model": width}), metrics))
    return RunIndex(store, ids)


def cells(fn) -> dict[tuple[int, int], float]:
    """fn(width index, length index) -> accuracy, over the CPU grid's cells (keyed by width and length)."""
    return {(w, L): fn(i, j) for i, w in enumerate(GRID["widths"]) for j, (L, _) in enumerate(GRID["settings"])}


ATTENTION = cells(lambda i, j: 0.99)
#: the claim: the gated convolution solves the shortest length from the second width on, the longest only at the
#: widest
TREND = cells(lambda i, j: 0.97 if i >= j + 1 else 0.3)


@pytest.mark.parametrize("conv, expected", [
    (TREND, REPRODUCED),
    (cells(lambda i, j: 0.98), NOT_REPRODUCED),  # solves every cell like attention: no width grows with length
    (cells(lambda i, j: 0.97 if i >= 1 else 0.3), NOT_REPRODUCED),  # the same width solves both lengths
    (cells(lambda i, j: 0.05), INCONCLUSIVE),  # learned nothing: failing the longer length shows nothing
])
def test_the_verdict_follows_the_gated_convolutions_trend(tmp_path, conv, expected):
    target = TARGETS.get("zoology-width-length").cls()
    runs = plant(tmp_path, {"attention": ATTENTION, "baseconv": conv})
    checks = target.checks(runs, "cpu")
    assert overall(checks) == expected, "\n".join(f"{c.what}: {c.verdict}" for c in checks)
    assert all(c.measured is not None and c.measured.low is not None for c in checks)


def test_attention_failing_a_cell_breaks_the_claim_and_its_negative_fails(tmp_path):
    target = TARGETS.get("zoology-width-length").cls()
    weak = {**ATTENTION, (GRID["widths"][0], GRID["settings"][-1][0]): 0.5}
    assert overall(target.checks(plant(tmp_path / "a", {"attention": weak, "baseconv": TREND}), "cpu")) \
        == NOT_REPRODUCED
    (negative,) = target.negatives("cpu")
    swapped = target.negative_target(negative)
    assert swapped.subject("gated_conv").mixer == "attention" and swapped.steps("cpu")[0].mixers == ("attention",)
    checks = swapped.checks(plant(tmp_path / "b", {"attention": ATTENTION, "baseconv": TREND}), "cpu")
    assert overall(checks) == NOT_REPRODUCED  # attention stays solved at the longer length


def test_each_width_is_its_own_step_with_both_subjects():
    target = TARGETS.get("zoology-width-length").cls()
    for scale, grid in GRIDS.items():
        steps = target.steps(scale)
        assert [s.suite_config["d_model"] for s in steps] == list(grid["widths"])
        assert all(s.mixers == ("attention", "baseconv") and s.mixer_configs == {"baseconv": {"filter_len": 512}}
                   for s in steps)
    assert max(L for L, _ in GRIDS["gpu"]["settings"]) <= 512  # the filter covers Figure 2's longest input
