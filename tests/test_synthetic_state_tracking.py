"""The synthetic suite's state-tracking tasks (docs/state_tracking.md): labels against naive loops, the groups'
tables, seeding, per-position scoring, the `none` control's expected score, the task groups and a tiny run of the
suite for deltanet, none and attention."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import torch

from harness.errors import ConfigError, MixbenchError
from harness.registry import SUITES
from harness.stats import wilson_interval
from harness.suite import SuiteContext
from suites.synthetic.scoring import accuracy_metric, position_hits, window_scores
from suites.synthetic.state_tracking import ModAddConfig, S3Config, S5Config, permutations, running_products
from suites.synthetic.suite import SyntheticConfig
from suites.synthetic.tasks import DEFAULT_TASKS, GROUPS, TASKS

STATE = ("parity", "mod-add", "s3", "s5")


# ------------------------------------------------------------------------------------------- naive references


def naive_labels(task: str, cfg, x: np.ndarray) -> list[int]:
    """One sequence's labels the slow way: parity by counting ones, the running sum mod m in a loop, permutations
    by composing tuples of images built here (not the module's tables)."""
    if task == "parity":
        return [int(np.count_nonzero(x[:t + 1] == 1)) % 2 for t in range(len(x))]
    if task == "mod-add":
        out, total = [], 0
        for g in x:
            total = (total + int(g)) % cfg.modulus
            out.append(total)
        return out
    n = {"s3": 3, "s5": 5}[task]
    perms = sorted(itertools.permutations(range(n)))  # lexicographic: the token order the task defines
    state = perms[int(x[0])]
    out = [perms.index(state)]
    for g in x[1:]:
        step = perms[int(g)]
        state = tuple(step[state[i]] for i in range(n))  # apply the state so far, then the new element
        out.append(perms.index(state))
    return out


@pytest.mark.parametrize("task, overrides", [("parity", {}), ("mod-add", {}), ("mod-add", {"modulus": 7}),
                                             ("s3", {}), ("s5", {})])
def test_labels_are_the_running_product_of_a_naive_loop(task, overrides):
    spec = TASKS[task]
    cfg = spec.make({"seq_len": 24, **overrides})
    data = spec.split(cfg, 3, "train", 40)
    assert data.inputs.shape == data.targets.shape == (40, 24) and data.loss_targets is None
    assert data.inputs.min() >= 0 and data.inputs.max() < cfg.group_size and (data.targets >= 0).all()
    for x, y in zip(data.inputs, data.targets):
        assert list(y) == naive_labels(task, cfg, x)
    # the inputs use the whole group and the labels are its elements too (the tied head emits a group element)
    assert len(np.unique(data.inputs)) == cfg.group_size
    assert cfg.vocab_size == cfg.group_size and spec.chance(cfg) == pytest.approx(1 / cfg.group_size)


def test_group_tables_are_the_groups():
    assert [c().group_size for c in (S3Config, S5Config)] == [6, 120] and ModAddConfig(modulus=7).group_size == 7
    for cfg in (S3Config(), S5Config(), ModAddConfig(modulus=4), TASKS["parity"].make({})):
        table = cfg.table()
        n = cfg.group_size
        assert (table[0] == np.arange(n)).all() and (table[:, 0] == np.arange(n)).all()  # token 0: the identity
        assert all(sorted(row) == list(range(n)) for row in table)  # a Latin square: every element invertible
        if n <= 8:
            a, b, c = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
            assert (table[table[a, b], c] == table[a, table[b, c]]).all()  # associative
    s3 = S3Config().table()
    assert (s3 != s3.T).any() and (ModAddConfig().table() == ModAddConfig().table().T).all()  # S3 is not abelian
    assert permutations(3)[1] == (0, 2, 1)  # lexicographic order, as the docs say


def test_cyclic_cumsum_matches_the_table_fold():
    """The cyclic groups' fast path (cumsum mod m) and the table fold the permutation groups use agree."""
    cfg = ModAddConfig(seq_len=30, modulus=6)
    x = np.random.default_rng(0).integers(0, 6, size=(20, 30))
    table, folded, state = cfg.table(), np.empty_like(x), x[:, 0].copy()
    folded[:, 0] = state
    for t in range(1, 30):
        state = table[x[:, t], state]
        folded[:, t] = state
    assert (running_products(cfg, x) == folded).all()


def test_generation_is_deterministic_and_keyed_by_task_seed_split_and_setting():
    cfg = TASKS["s3"].make({"seq_len": 12})
    a = TASKS["s3"].split(cfg, 0, "test", 16)
    assert a.fingerprint() == TASKS["s3"].split(cfg, 0, "test", 16).fingerprint()
    others = [TASKS["s3"].split(cfg, 1, "test", 16), TASKS["s3"].split(cfg, 0, "valid", 16),
              TASKS["s5"].split(TASKS["s5"].make({"seq_len": 12}), 0, "test", 16),
              TASKS["s3"].split(TASKS["s3"].make({"seq_len": 12, "num_train_examples": 9}), 0, "test", 16)]
    assert len({a.fingerprint(), *(o.fingerprint() for o in others)}) == 5


def test_a_context_free_predictor_scores_chance_at_the_end_and_one_at_the_start():
    """What the `none` control can do: the best guess from the current token alone is right at position 0 (the
    label is the token) and at chance after it, so 1/|G| + (1 - 1/|G|)/T over all positions."""
    for task in STATE:
        spec = TASKS[task]
        cfg = spec.make({"seq_len": 10})
        data = spec.split(cfg, 0, "test", 3000)

        def own_token(x, mask):
            return x[mask]

        hits, mask = position_hits(own_token, data, 512)
        assert hits[:, 0].all() and mask.all()
        chance = spec.chance(cfg)
        final = window_scores(hits, mask, 9, 10)
        overall = window_scores(hits, mask, 0, 10)
        assert wilson_interval(final.n_correct, final.n_targets, 0.999).contains(chance), task
        expected = chance + (1 - chance) / 10
        assert wilson_interval(overall.n_correct, overall.n_targets, 0.999).contains(expected), task


def test_position_windows_on_a_hand_computed_case():
    from suites.synthetic.data import IGNORE, TaskData

    data = TaskData(np.array([[1, 2, 3], [4, 5, 6]]), np.array([[1, 0, 3], [IGNORE, 5, 0]]))
    hits, mask = position_hits(lambda x, m: x[m], data, 1)  # predicts its own input
    assert hits.tolist() == [[True, False, True], [False, True, False]]
    assert mask.tolist() == [[True, True, True], [False, True, True]]
    last = window_scores(hits, mask, 2, 3)
    assert last.correct.tolist() == [1, 0] and last.total.tolist() == [1, 1]
    whole = window_scores(hits, mask, 0, 3)
    assert whole.correct.tolist() == [2, 1] and whole.total.tolist() == [3, 2] and whole.accuracy == 3 / 5
    m = accuracy_metric("t/acc", whole, ["a", "b"], 0.5, 0.95)
    assert (m.interval.low, m.interval.high) == pytest.approx(
        (wilson_interval(3, 5, 0.95).low, wilson_interval(3, 5, 0.95).high))  # Wilson over target positions


def test_state_tracking_is_opt_in_and_named_by_its_group():
    assert not set(GROUPS["state-tracking"]) & set(SyntheticConfig().tasks) and SyntheticConfig().tasks == DEFAULT_TASKS
    entry = SUITES.get("synthetic")
    assert not set(GROUPS["state-tracking"]) & set(entry.make_config(dict(entry.cls.quickstart)).tasks)
    cfg = entry.make_config({"tasks": "state-tracking", "settings": "mod-add:seq_len=16,modulus=7"})
    assert cfg.tasks == STATE
    assert [f"{t.name}/{t.label(c)}" for t, c in cfg.plan()] == ["parity/seq32", "mod-add/seq16_mod7", "s3/seq32",
                                                                 "s5/seq32"]
    assert [t.label(c) for t, c in SyntheticConfig(tasks="parity", grid="full").plan()] == ["seq32", "seq64",
                                                                                           "seq128"]
    for bad in ({"settings": "parity:seq_len=1", "tasks": "parity"}, {"settings": "mod-add:modulus=1",
                                                                      "tasks": "mod-add"},
                {"tasks": "state-tracking,parity"}, {"extrapolate_all": "maybe"}):
        with pytest.raises(MixbenchError):
            entry.make_config(bad)
    with pytest.raises(ConfigError):
        ModAddConfig(modulus=1)


# ----------------------------------------------------------------------------------------------- the suite

TINY: dict[str, Any] = {
    "tasks": "parity", "settings": "parity:seq_len=8,num_train_examples=64", "d_model": 16, "n_layers": 1,
    "max_steps": 4, "eval_every": 2, "lrs": "3e-3", "valid_examples": 16, "test_examples": 24,
    "extrapolation": "2,4",
}


def _run(mixer: str, tmp_path, mixer_config: dict | None = None, **overrides):
    entry = SUITES.get("synthetic")
    suite = entry.cls(entry.make_config({**TINY, **overrides}))
    result = suite.run_mixer(mixer, dict(mixer_config or {}), SuiteContext(None, tmp_path / mixer, 0, "cpu", False))
    return {m.name: m for m in result.metrics}, result.info


def test_a_state_tracking_task_runs_through_the_suite_for_deltanet_none_and_attention(tmp_path):
    d, d_info = _run("deltanet", tmp_path, {"allow_neg_eigval": True})
    n, _ = _run("none", tmp_path)
    p = "parity/seq8_train64"
    names = {f"{p}/acc", f"{p}/final_acc", f"{p}/state_floats", f"{p}/extrap_x2_acc", f"{p}/extrap_x2_final_acc",
             f"{p}/extrap_x4_acc", f"{p}/extrap_x4_final_acc", "parity/avg_custom1"}
    assert names <= set(d) and names <= set(n)
    acc, final = d[f"{p}/acc"], d[f"{p}/final_acc"]
    assert acc.role == "score" and acc.chance == 0.5 and acc.n == 24 * 8 and acc.interval.kind == "wilson"
    assert final.role == "diagnostic" and final.n == 24 and d[f"{p}/extrap_x2_acc"].n == 24 * 8  # positions 8..15
    assert d[f"{p}/extrap_x4_final_acc"].n == 24 and acc.items.ids == n[f"{p}/acc"].items.ids  # paired
    assert d[f"{p}/extrap_x4_acc"].items.ids != acc.items.ids  # the longer test split has its own examples
    setting = d_info["settings"][0]
    assert [len(setting["position_accuracy"][k]) for k in ("x1", "x2", "x4")] == [8, 16, 32]
    assert not any("scaled" in k or "len" in k.split("/")[-1] for k in d) and "protocol" not in setting  # defaults
    assert setting["extrapolation"]["x4"]["seq_len"] == 32 and setting["model_context"] == 8
    # attention declares no length extrapolation: not scored past L unless asked, then built for 4L
    a, a_info = _run("attention", tmp_path, n_layers=1, extrapolation="2")
    assert f"{p}/acc" in a and not any("extrap" in k for k in a)
    assert "no length extrapolation" in a_info["settings"][0]["extrapolation_skipped"]
    a, a_info = _run("attention", tmp_path / "all", extrapolation="2", extrapolate_all=True)
    assert f"{p}/extrap_x2_final_acc" in a and a_info["settings"][0]["model_context"] == 16


def test_a_perfect_reader_scores_one_everywhere():
    """The scoring path on an oracle: every position, the final one and the longer split all at 1."""
    spec = TASKS["s3"]
    cfg = spec.make({"seq_len": 6})
    for length in (6, 12):
        data = spec.split(spec.make({"seq_len": length}), 0, "test", 50)
        table = cfg.table()

        def oracle(x, mask):
            xs = x.numpy()
            out = np.empty_like(xs)
            state = xs[:, 0]
            out[:, 0] = state
            for t in range(1, xs.shape[1]):
                state = table[xs[:, t], state]
                out[:, t] = state
            return torch.from_numpy(out)[mask]

        hits, mask = position_hits(oracle, data, 16)
        assert hits.all() and window_scores(hits, mask, length - 1, length).accuracy == 1.0


def test_sizes_past_their_bounds_are_refused_in_one_sentence(tmp_path, capsys):
    """A mod-add modulus of 10^9 passed validation and ended in a MemoryError after 168 s: every size of a task
    setting that drives memory (modulus, vocabulary, length, examples, and the tested lengths and splits) has a
    bound, checked when the config is built, named with its reason."""
    import time

    from tests.conftest import main

    store = tmp_path / "store"
    t0 = time.perf_counter()
    code = main(["eval", "--suite", "synthetic", "--mixer", "none", "--preset", "tiny", "--suite-config",
                 "tasks=mod-add", "settings=mod-add:modulus=1000000000", "--results", str(store), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "mod-add: modulus must be at most 1,024, got 1,000,000,000" in err and "Cayley table" in err, err
    assert time.perf_counter() - t0 < 60 and not store.exists()
    for tasks, settings, message in (
        ("mqar", "mqar:vocab_size=1000000", "vocab_size must be at most 65,536"),
        ("in-context-recall", "in-context-recall:seq_len=100000", "seq_len must be at most 16,384"),
        ("compression", "compression:num_train_examples=100000000", "num_train_examples must be at most"),
        ("compression", "compression:num_train_examples=9000000,seq_len=64", "training split's tokens"),
        ("parity", "parity:seq_len=8192", "longest tested length"),  # tested at 4 x 8,192
    ):
        with pytest.raises(ConfigError, match=message):
            SyntheticConfig(tasks=tasks, settings=settings)
    with pytest.raises(ConfigError, match="test_examples must be at most"):
        SyntheticConfig(tasks="parity", test_examples=10**8)
    assert ModAddConfig(modulus=1024).group_size == 1024  # the bound itself is allowed, its size not listed


# ------------------------------------------------------------------------------- Grazzi et al.'s protocol options

def test_scaled_accuracy_is_the_wilson_interval_mapped_by_hand():
    """30 of 40 at chance 1/2: accuracy 0.75, scaled 0.5; Wilson's bounds from its formula, mapped by (a - c)/(1 - c).
    At chance 1/6 (S3) the same counts give (0.75 - 1/6) / (5/6) = 0.7."""
    from suites.synthetic.scoring import ExampleScores, scaled_accuracy_metric

    scores = ExampleScores(np.array([1] * 30 + [0] * 10), np.ones(40, dtype=np.int64))
    z, n, p = 1.959963984540054, 40, 0.75
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    for chance, value in ((0.5, 0.5), (1 / 6, 0.7)):
        m = scaled_accuracy_metric("t", scores, [str(i) for i in range(40)], chance, 0.95)
        assert m.value == pytest.approx(value)
        assert m.interval.low == pytest.approx((centre - half - chance) / (1 - chance), abs=1e-9)
        assert m.interval.high == pytest.approx((centre + half - chance) / (1 - chance), abs=1e-9)
        assert m.chance == 0.0 and m.perfect == 1.0 and m.interval.kind == "wilson"
        assert sum(v * w for v, w in zip(m.items.values, m.items.weights)) / 40 == pytest.approx(value)


def test_variable_lengths_are_masked_so_a_padded_batch_scores_what_each_example_scores_alone():
    """Lengths 3..12 per example, right-padded and labelled at the end: a (random, causal) deltanet model's
    predictions at each example's end in one padded batch equal a loop over the unpadded examples, one at a time."""
    from harness.config import BackboneConfig, ModelSpec
    from suites.synthetic.scoring import end_scores
    from suites.synthetic.state_tracking import ParityConfig, draw_lengths, generate_word_problem, mask_lengths
    from suites.synthetic.train import build_task_model

    cfg = ParityConfig(seq_len=12, num_train_examples=1)
    data = generate_word_problem(cfg, 10, np.random.default_rng(0), False)
    lengths = draw_lengths(np.random.default_rng(1), 10, 3, 12)
    assert lengths.min() >= 3 and lengths.max() <= 12 and len(set(lengths)) > 3
    end, every = mask_lengths(data, lengths, True), mask_lengths(data, lengths, False)
    for i, n in enumerate(lengths):
        assert (end.targets[i] >= 0).sum() == 1 and end.targets[i, n - 1] == data.targets[i, n - 1]
        assert (every.targets[i, :n] == data.targets[i, :n]).all() and (every.targets[i, n:] < 0).all()
        assert (end.inputs[i, n:] == 0).all() and (end.inputs[i, :n] == data.inputs[i, :n]).all()
    model = build_task_model(ModelSpec("deltanet", {}, BackboneConfig(16, 1, 12, 2)), "lm", 0, torch.device("cpu"))
    logits = model.lm.norm(model.lm.hidden_states(torch.from_numpy(end.inputs))[-1]) @ model.lm.embed.weight.T
    hits, mask = position_hits(model.predict, end, 4, "cpu")
    padded = end_scores(hits, mask)
    for i, n in enumerate(lengths):
        alone = torch.from_numpy(data.inputs[i:i + 1, :n])
        h = model.lm.norm(model.lm.hidden_states(alone)[-1]) @ model.lm.embed.weight.T
        assert torch.allclose(h[0, -1], logits[i, n - 1], atol=1e-5)
        assert padded.correct[i] == int(h[0, -1].argmax() == int(data.targets[i, n - 1]))
    assert (padded.total == 1).all()
    # with full lengths and every position labelled, the end is the last position (the default final_acc)
    full_hits = np.random.default_rng(2).random((6, 9)) > 0.5
    full = end_scores(full_hits, np.ones((6, 9), dtype=bool))
    assert (full.correct == window_scores(full_hits, np.ones((6, 9), dtype=bool), 8, 9).correct).all()


def test_the_protocol_options_run_through_the_suite_and_are_recorded(tmp_path):
    """Train on lengths 3-8 labelled at the end, test on 8-20, best of 2 seeds: one target per example at the end,
    the scaled metrics, the test range's model context for attention, the protocol and the seeds in info."""
    opts = {"min_len": 3, "labels": "end", "test_lengths": "8-20", "seeds": 2, "extrapolation": ""}
    d, info = _run("deltanet", tmp_path, {"allow_neg_eigval": True}, **opts)
    p = "parity/seq8_train64"
    assert d[f"{p}/acc"].n == 24 and d[f"{p}/final_acc"].n == 24 and d[f"{p}/acc"].value == d[f"{p}/final_acc"].value
    scaled = d[f"{p}/final_scaled"]
    assert scaled.value == pytest.approx(2 * d[f"{p}/final_acc"].value - 1)
    assert d[f"{p}/len8to20_final_acc"].n == 24 and f"{p}/len8to20_final_scaled" in d
    setting = info["settings"][0]
    assert setting["protocol"] == {"train_lengths": [3, 8], "labels": "end", "test_lengths": [8, 20], "seeds": 2,
                                   "padding": "right, token 0, no target (exact for causal models)"}
    seeds = setting["tries"][-1]
    assert [s["seed_index"] for s in seeds["best_of_seeds"]] == [0, 1] and "validation" in seeds["selected_by"]
    chosen = seeds["best_of_seeds"][seeds["chosen_seed_index"]]["val_accuracy"]
    assert chosen == max(s["val_accuracy"] for s in seeds["best_of_seeds"]) == setting["chosen"]["val_accuracy"]
    _, a_info = _run("attention", tmp_path / "a", **{**opts, "seeds": 1}, extrapolate_all=True)
    assert a_info["settings"][0]["model_context"] == 20
    for bad in ({"min_len": 1}, {"labels": "first"}, {"test_lengths": "40"}, {"test_lengths": "9-3"},
                {"seeds": 0}, {"min_len": 9}):
        with pytest.raises(MixbenchError):
            SUITES.get("synthetic").make_config({**TINY, **bad})
