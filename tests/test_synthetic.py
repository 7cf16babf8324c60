"""The synthetic suite (docs/synthetic.md): generators (exact, structurally right, free of global RNG state),
scoring against by-hand cases, oracle and guess-the-mode predictors, the suite end to end and its site section."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from harness.model.backbone import build_model
from harness.config import BackboneConfig, ModelSpec
from harness.errors import ConfigError, MixbenchError
from harness.registry import SUITES
from harness.stats import Interval
from harness.suite import Metric, SuiteContext
from suites.synthetic import mad
from suites.synthetic.data import IGNORE, TaskData, split_rng, weighted_sample_without_replacement
from suites.synthetic.mqar import MQARConfig, generate_mqar
from suites.synthetic.scoring import ExampleScores, accuracy_metric, average_metric, score_split
from harness.reporting.pareto import pareto_front
from suites.synthetic.site import site_section
from suites.synthetic.suite import PLOT_NAME, SyntheticConfig
from suites.synthetic.tasks import TASKS, parse_settings, unigram_mode
from suites.synthetic.train import TaskModel, TrainSettings, sweep

#: every task at its base setting, made smaller where the base is long, so the tests stay fast
SMALL = {
    "mqar": {"seq_len": 64, "num_kv_pairs": 4},
    "in-context-recall": {"seq_len": 64},
    "fuzzy-recall": {"seq_len": 64},
    "noisy-recall": {"seq_len": 64},
    "selective-copy": {"seq_len": 64, "num_tokens_to_copy": 8},
    "compression": {},
    "memorization": {},
    "parity": {"seq_len": 16},
    "mod-add": {"seq_len": 16},
    "s3": {"seq_len": 16},
    "s5": {"seq_len": 16},
}


def small(task: str, **extra):
    return TASKS[task].make({**SMALL[task], **extra})


def fingerprints(n: int = 64) -> dict[str, str]:
    """SHA-256 prefixes of 64 train and 64 test examples of each task, data seed 7."""
    return {f"{name}/{split}": TASKS[name].split(small(name), 7, split, n).fingerprint()[:16]
            for name in TASKS for split in ("train", "test")}


# ------------------------------------------------------------------------------------------------ seeding

#: computed once in another process and pinned: the data are a function of (task setting, seed, split) alone,
#: the same bytes in every process, machine and run. A change here changes every synthetic number: bump
#: ``Synthetic.version`` and update these (``python -c "from tests.test_synthetic import fingerprints; ..."``).
PINNED = {
    "mqar/train": "1579e13f146a42cd",
    "mqar/test": "554213cc9cf707c6",
    "in-context-recall/train": "4d567976543c9fde",
    "in-context-recall/test": "6255e6550c294e80",
    "fuzzy-recall/train": "239396167b3dc7de",
    "fuzzy-recall/test": "7016b513e54a9a74",
    "noisy-recall/train": "e6c54490fcf21517",
    "noisy-recall/test": "f5c3292f42a0cb7f",
    "selective-copy/train": "99284d21b4f21fd0",
    "selective-copy/test": "c5d13303ba64b742",
    "compression/train": "eeae11a6da64a8da",
    "compression/test": "c3c49f306f9b0b7a",
    "memorization/train": "1ad17a1abe4fe381",
    "memorization/test": "da67a18dda0e77a8",
    "parity/train": "37ed7608656408aa",
    "parity/test": "8ff3bb75cc239d9f",
    "mod-add/train": "af09395a6a9b9e00",
    "mod-add/test": "be9847b9d8d215ab",
    "s3/train": "845e57bfe97b7e55",
    "s3/test": "15cde7da392bf4dd",
    "s5/train": "e0f68584077f08b8",
    "s5/test": "9f214f262a469175",
}


def test_generators_give_exactly_the_pinned_bytes():
    assert fingerprints() == PINNED


def test_splits_seeds_and_settings_draw_different_streams():
    cfg = small("mqar")
    a = TASKS["mqar"].split(cfg, 0, "train", 32)
    assert a.fingerprint() == TASKS["mqar"].split(cfg, 0, "train", 32).fingerprint()
    others = [TASKS["mqar"].split(cfg, 0, "test", 32), TASKS["mqar"].split(cfg, 1, "train", 32),
              TASKS["mqar"].split(small("mqar", power_a=0.5), 0, "train", 32)]
    assert len({a.fingerprint(), *(o.fingerprint() for o in others)}) == 4


def test_no_generator_reads_or_moves_global_rng_state():
    def global_states():
        return (torch.get_rng_state().clone(), np.random.get_state()[1].copy(), random.getstate())

    results = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        before = global_states()
        results.append(fingerprints(16))
        after = global_states()
        assert torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1]) and before[2] == after[2]
    assert results[0] == results[1]


# --------------------------------------------------------------------------------------------- invariants


def test_mqar_structure():
    cfg = MQARConfig(seq_len=128, num_kv_pairs=8, vocab_size=512)
    d = generate_mqar(cfg, 500, np.random.default_rng(0), training=True)
    k, half = 8, 256
    keys, values = d.inputs[:, 0:2 * k:2], d.inputs[:, 1:2 * k:2]
    assert ((keys >= 1) & (keys < half)).all() and ((values >= half) & (values < 512)).all()
    assert all(len(set(r)) == k for r in keys) and all(len(set(r)) == k for r in values)
    for row in range(len(d)):
        pos = np.flatnonzero(d.targets[row] != IGNORE)
        assert len(pos) == k and (pos >= 2 * k).all() and ((pos - 2 * k) % 2 == 0).all()
        queried = d.inputs[row, pos]
        assert sorted(queried) == sorted(keys[row])  # every key queried once, at its query position
        pair = dict(zip(keys[row], values[row]))
        assert [pair[q] for q in queried] == list(d.targets[row, pos])
    assert (d.loss_targets is None) and d.train_targets is d.targets  # zoology trains on the queries only


def test_mqar_gaps_follow_the_power_law():
    cfg = MQARConfig(seq_len=32, num_kv_pairs=1, vocab_size=128, power_a=0.01)
    d = generate_mqar(cfg, 100_000, np.random.default_rng(3), training=False)
    gaps = (np.argmax(d.targets != IGNORE, axis=1) - 2) // 2
    observed = np.bincount(gaps, minlength=cfg.query_slots)
    p = cfg.gap_weights() / cfg.gap_weights().sum()
    assert sps.chisquare(observed, p * len(gaps)).pvalue > 1e-3
    uniform = np.full(cfg.query_slots, len(gaps) / cfg.query_slots)
    assert sps.chisquare(observed, uniform).pvalue < 1e-12  # the check can tell the law from another one


def test_gaps_without_replacement_match_numpys_sequential_draws():
    weights = MQARConfig(seq_len=64, num_kv_pairs=4, vocab_size=128).gap_weights()
    ours = weighted_sample_without_replacement(np.random.default_rng(5), weights, 8000, 4)
    ref_rng = np.random.default_rng(6)
    reference = np.stack([ref_rng.choice(len(weights), 4, replace=False, p=weights / weights.sum())
                          for _ in range(8000)])
    assert all(len(set(r)) == 4 for r in ours[:2000])
    for column in range(4):  # the law of each draw in order, against numpy's own implementation
        table = np.stack([np.bincount(ours[:, column], minlength=len(weights)),
                          np.bincount(reference[:, column], minlength=len(weights))])
        table = table[:, table.sum(0) > 0]
        assert sps.chi2_contingency(table).pvalue > 1e-3


def test_in_context_and_noisy_recall_structure():
    for task in ("in-context-recall", "noisy-recall"):
        cfg = small(task)
        d = TASKS[task].split(cfg, 0, "test", 300)
        k_lo, k_hi = cfg.key_vocab
        v_lo, v_hi = cfg.value_vocab
        assert d.seq_len == cfg.seq_len - 1
        assert np.array_equal(d.loss_targets[:, :-1], d.inputs[:, 1:])  # MAD trains on every next token
        noise_slots = total_slots = 0
        for row in range(len(d)):
            x, y = d.inputs[row], d.targets[row]
            pairs = list(zip(x[0::2], np.append(x[1::2], y[-1])))
            seen: dict[int, int] = {}
            expected = np.full(len(x), IGNORE)
            for j, (key, value) in enumerate(pairs):
                if cfg.noise_vocab_size and key >= cfg.noise_vocab[0]:
                    assert value >= cfg.noise_vocab[0]
                    noise_slots += j < len(pairs) - 1
                    continue
                assert k_lo <= key < k_hi and v_lo <= value < v_hi
                assert seen.setdefault(key, value) == value  # one value per key in an example
                if j == len(pairs) - 1 or list(x[0:2 * j:2]).count(key):
                    expected[2 * j] = value
            total_slots += len(pairs) - 1
            assert np.array_equal(y, expected)
            assert x[-1] in x[:-1:2]  # the final query asks a key shown before
        if task == "noisy-recall":
            low, high = proportion_confint(noise_slots, total_slots, 1e-4, method="wilson")
            slots = cfg.seq_len // 2 - 1
            assert low <= cfg.frac_noise * (slots - 1) / slots <= high  # one slot per example is forced real


def test_fuzzy_recall_structure():
    cfg = small("fuzzy-recall")
    for split in ("train", "test"):
        d = TASKS["fuzzy-recall"].split(cfg, 0, split, 150)
        sizes = set()
        for row in range(len(d)):
            segments = _segments(np.append(d.inputs[row], d.loss_targets[row, -1]), cfg)
            seen: dict[tuple, tuple] = {}
            for key, value in segments:
                sizes.add(len(key))
                assert 1 <= len(value) <= cfg.v_motif_size and len(set(key)) == len(key)
                assert seen.setdefault(key, value) == value
            last_key = segments[-1][0]
            assert last_key in [k for k, _ in segments[:-1]]  # the probe was shown before the final query
            scored = d.targets[row] != IGNORE
            assert scored[-1] and (d.inputs[row][d.inputs[row] == cfg.pad_token].size < cfg.seq_len)
        assert sizes == ({cfg.k_motif_size} if split == "test" else set(range(1, cfg.k_motif_size + 1)))


def _segments(seq: np.ndarray, cfg) -> list[tuple[tuple, tuple]]:
    """(key, value) motifs of a fuzzy-recall sequence: runs of key tokens followed by runs of value tokens."""
    k_lo, k_hi = cfg.key_vocab
    out, key, value = [], [], []
    for t in seq:
        t = int(t)
        if t == cfg.pad_token:
            continue
        if k_lo <= t < k_hi:
            if value:
                out.append((tuple(key), tuple(value)))
                key, value = [], []
            key.append(t)
        else:
            value.append(t)
    out.append((tuple(key), tuple(value)))
    return out


def test_selective_copy_compression_memorization_structure():
    cfg = small("selective-copy")
    d = TASKS["selective-copy"].split(cfg, 0, "test", 200)
    region = cfg.seq_len - cfg.num_tokens_to_copy - 1
    assert (d.inputs[:, region] == cfg.copy_token).all() and (d.inputs[:, region + 1:] == cfg.blank_token).all()
    content = [r[r != cfg.blank_token] for r in d.inputs[:, :region]]
    assert all(len(c) == cfg.num_tokens_to_copy for c in content)
    assert np.array_equal(np.stack(content), d.targets[:, region + 1:])
    assert (d.targets[:, :region + 1] == IGNORE).all()
    last = np.array([np.flatnonzero(r != cfg.blank_token)[-1] for r in d.inputs[:, :region]])
    assert (last < region - 1).any()  # tokens are spread over the region (MAD's last token is always adjacent)

    cfg = small("compression")
    d = TASKS["compression"].split(cfg, 0, "test", 50)
    assert (d.inputs[:, -1] == cfg.compression_token).all() and (d.targets[:, -1] == IGNORE).all()
    assert np.array_equal(d.targets[:, :-1], d.inputs[:, :-1]) and d.inputs[:, :-1].max() < cfg.compression_token

    cfg = small("memorization")
    splits = [TASKS["memorization"].split(cfg, 0, s, 100) for s in ("train", "test")]
    facts: dict[int, int] = {}
    for d in splits:
        assert (d.inputs[:, 1::2] == cfg.insert_token).all() and (d.targets[:, 0::2] == IGNORE).all()
        for key, value in zip(d.inputs[:, 0::2].ravel(), d.targets[:, 1::2].ravel()):
            assert facts.setdefault(int(key), int(value)) == value  # one fixed map across splits
    assert len(set(facts.values())) == len(facts) and min(facts.values()) >= cfg.n_keys


# ---------------------------------------------------------------------------------------------- scoring


def test_accuracy_masks_against_a_hand_computed_case():
    inputs = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]])
    targets = np.array([[IGNORE, 7, IGNORE, 8], [IGNORE, IGNORE, IGNORE, 3], [1, 2, 3, IGNORE]])
    data = TaskData(inputs, targets)
    answers = {(0, 1): 7, (0, 3): 0, (1, 3): 3, (2, 0): 1, (2, 1): 0, (2, 2): 0}

    def predict(x, mask):
        first = int(x[0, 0])
        rows = {1: 0, 5: 1, 9: 2}
        base = rows[first]
        return torch.tensor([answers[(base + int(r), int(t))] for r, t in mask.nonzero()])

    scores = score_split(predict, data, batch_size=2)
    assert scores.correct.tolist() == [1, 1, 1] and scores.total.tolist() == [2, 1, 3]
    m = accuracy_metric("t/acc", scores, ("a", "b", "c"), chance=0.25, level=0.95)
    assert m.value == pytest.approx(3 / 6) and m.n == 6 and m.role == "score" and m.chance == 0.25
    assert (m.interval.low, m.interval.high) == pytest.approx(proportion_confint(3, 6, 0.05, method="wilson"))
    assert m.items.values == pytest.approx((0.5, 1.0, 1 / 3)) and m.items.weights == (2.0, 1.0, 3.0)
    w = np.array(m.items.weights)
    assert float(np.sum(w * np.array(m.items.values)) / w.sum()) == pytest.approx(m.value)


def test_average_items_reproduce_the_mean_of_accuracies():
    a = ExampleScores(np.array([1, 2]), np.array([2, 2]))  # 3 / 4
    b = ExampleScores(np.array([0, 1, 1]), np.array([1, 1, 8]))  # 2 / 10
    m = average_metric("t/avg", [(a, ("a0", "a1")), (b, ("b0", "b1", "b2"))], chance=0.1, level=0.95)
    assert m.value == pytest.approx((0.75 + 0.2) / 2) and m.role == "diagnostic" and m.interval.kind == "normal"
    w, v = np.array(m.items.weights), np.array(m.items.values)
    assert float(np.sum(w * v) / w.sum()) == pytest.approx(m.value)
    s = [proportion_confint(c, n, 0.05, method="wilson") for c, n in ((3, 4), (2, 10))]
    se = np.sqrt(sum(((hi - lo) / 2 / sps.norm.ppf(0.975)) ** 2 for lo, hi in s)) / 2
    assert m.interval.high == pytest.approx(m.value + sps.norm.ppf(0.975) * se)


# ------------------------------------------------------------------------------------ oracle and baseline


def _per_target(fn):
    """A predictor from a function of (one example's inputs, position) -> token."""

    def predict(x, mask):
        xs = x.numpy()
        return torch.tensor([fn(xs[r], t) for r, t in mask.nonzero().tolist()], dtype=torch.long)

    return predict


def oracle(task: str, cfg, train: TaskData):
    """A hand-written lookup that reads the context (memorization: the facts seen in training)."""
    if task == "mqar":
        return _per_target(lambda x, t: x[int(np.flatnonzero(x[:t] == x[t])[0]) + 1])
    if task in ("in-context-recall", "noisy-recall"):
        return _per_target(lambda x, t: x[int(np.flatnonzero(x[:t] == x[t])[-1]) + 1])
    if task == "fuzzy-recall":
        def answer(x, t):
            segs = _segments(x[:t + 1], cfg)
            key, value = segs[-1]
            known = dict(segs[:-1])[key]
            return known[len(value)]
        return _per_target(answer)
    if task == "selective-copy":
        def copy(x, t):
            c = int(np.flatnonzero(x == cfg.copy_token)[0])
            return x[:c][x[:c] != cfg.blank_token][t - c - 1]
        return _per_target(copy)
    if task == "compression":
        return _per_target(lambda x, t: x[t])
    if TASKS[task].state_tracking:  # the running product, one composition at a time (Cayley table lookups)
        table = cfg.table()

        def product(x, t):
            state = int(x[0])
            for g in x[1:t + 1]:
                state = int(table[g, state])
            return state
        return _per_target(product)
    facts = {int(k): int(v) for k, v in zip(train.inputs[:, 0::2].ravel(), train.targets[:, 1::2].ravel())}
    return _per_target(lambda x, t: facts[int(x[t - 1])])


@pytest.mark.parametrize("task", list(TASKS))
def test_an_oracle_scores_one_and_the_unigram_mode_scores_chance(task):
    cfg = small(task)
    spec = TASKS[task]
    train = spec.split(cfg, 0, "train", spec.train_examples(cfg) if task == "memorization" else 400)
    test = spec.split(cfg, 0, "test", 150)
    assert score_split(oracle(task, cfg, train), test, 64).accuracy == 1.0
    mode = unigram_mode(train.targets)
    big = spec.split(cfg, 0, "valid", 1500)
    scores = score_split(lambda x, m: torch.full((int(m.sum()),), mode), big, 500)
    # 99.9% intervals: seven tasks are checked, so a 99% level would fail one run in fifteen by chance alone
    m = accuracy_metric("x/acc", scores, [str(i) for i in range(len(big))], spec.chance(cfg), 0.999)
    assert m.interval.contains(spec.chance(cfg)), (task, m.value, spec.chance(cfg))


def test_logits_at_targets_match_the_backbone_forward():
    spec = ModelSpec("attention", {}, BackboneConfig(32, 2, 16, 64))
    model = TaskModel(build_model(spec, seed=0), "lm", 16).eval()
    x = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.rand(3, 16, generator=torch.Generator().manual_seed(1)) > 0.5
    full, _ = model.lm(x)
    assert torch.allclose(model.logits_at(x, mask), full[mask], atol=1e-5)


# ------------------------------------------------------------------------------------------------ config


def test_config_validation_and_settings():
    assert parse_settings("mqar:seq_len=64,num_kv_pairs=4; compression:")["compression"] == [{}]
    cfg = SyntheticConfig(tasks="mqar,compression", settings="mqar:seq_len=128,num_kv_pairs=8,power_a=0.5",
                          lrs="1e-3,3e-3")
    assert [TASKS[t.name].label(c) for t, c in cfg.plan()] == ["seq128_kv8_a0.5", "base"]
    assert cfg.lrs == (1e-3, 3e-3) and len(cfg.grid_points()) == 2
    assert [t.label(c) for t, c in SyntheticConfig(tasks=("noisy-recall",), grid="full").plan()][:3] == \
        ["base", "vocab48", "vocab80"]
    for bad in ({"tasks": ("nope",)}, {"grid": "all"}, {"settings": "mqar:seq_len=63"}, {"lrs": ()},
                {"settings": "selective-copy:num_tokens_to_copy=2", "tasks": ("mqar",)}, {"stop_accuracy": 0},
                {"settings": "mqar:seq_len=sixty"}, {"settings": "mqar:vocab_size=32,seq_len=64"},
                {"d_model": 0}, {"settings": "mqar:seq_len=64;mqar:seq_len=64"}):
        with pytest.raises(MixbenchError):  # a ConfigError, or an unknown task name
            SyntheticConfig(**bad)
    with pytest.raises(ConfigError):
        mad.SelectiveCopyConfig(seq_len=33, num_tokens_to_copy=16)


def test_quickstart_config_is_mqar_at_two_lengths_and_two_mad_tasks():
    entry = SUITES.get("synthetic")
    cfg = entry.make_config(dict(entry.cls.quickstart))
    labels = [f"{t.name}/{t.label(c)}" for t, c in cfg.plan()]
    assert labels[:2] == ["mqar/seq64_kv4_train2000", "mqar/seq128_kv8_train2000"]
    assert len({label.split("/")[0] for label in labels[2:]} - {"mqar"}) == 2 and len(cfg.grid_points()) == 1


# ----------------------------------------------------------------------------------------------- the suite


TINY = {
    "tasks": ("mqar", "compression"),
    "settings": "mqar:seq_len=16,num_kv_pairs=2,vocab_size=64,num_train_examples=256;"
                "compression:seq_len=8,vocab_size=8,num_train_examples=256",
    "d_model": 16, "max_steps": 6, "eval_every": 3, "lrs": (3e-3,), "valid_examples": 16,
    "test_examples": 24, "extrapolation": (2,),
}


def _suite(overrides: dict[str, Any]):
    entry = SUITES.get("synthetic")
    return entry.cls(entry.make_config(overrides))


@pytest.mark.slow
def test_suite_end_to_end_for_two_mixers(tmp_path):
    suite = _suite(TINY)
    results = {}
    for mixer in ("attention", "protot"):
        ctx = SuiteContext(None, tmp_path / mixer, seed=0, progress=False)
        results[mixer] = suite.run_mixer(mixer, {}, ctx)
    a, p = ({m.name: m for m in results[k].metrics} for k in ("attention", "protot"))
    names = {"mqar/seq16_kv2_vocab64_train256/acc", "mqar/seq16_kv2_vocab64_train256/state_floats",
             "compression/vocab8_seq8_train256/acc", "mqar/avg_custom1", "compression/avg_custom1"}
    assert names <= set(a) and names <= set(p)
    acc = a["mqar/seq16_kv2_vocab64_train256/acc"]
    assert acc.role == "score" and acc.chance == 1 / 32 and acc.perfect == 1.0 and acc.n == 24 * 2
    assert acc.items.ids == p["mqar/seq16_kv2_vocab64_train256/acc"].items.ids  # paired across mixers
    # attention's KV cache after 16 tokens in each of 2 layers; ProtoT's state does not grow with length
    assert a["mqar/seq16_kv2_vocab64_train256/state_floats"].value == 2 * 2 * 16 * 16
    extrap = "mqar/seq16_kv2_vocab64_train256/extrap_x2_acc"
    assert extrap in p and extrap not in a  # only mixers that declare length extrapolation
    info = results["attention"].info
    assert info["wall_s"] > 0 and all(s["wall_s"] > 0 for s in info["settings"])
    assert len(info["settings"][0]["tries"]) == 1 and results["attention"].plots[0].name == PLOT_NAME
    assert results["attention"].plots[0].stat().st_size > 1000


@pytest.mark.slow
def test_sweep_tries_the_grid_in_order_and_stops_at_the_threshold():
    task = TASKS["mqar"]
    cfg = task.make({"seq_len": 16, "num_kv_pairs": 2, "vocab_size": 32, "num_train_examples": 64})
    # 64 validation targets and 32 steps: each run leaves chance (1/30) on some targets, so the grid's points
    # differ (two steps, the first version, depended on the initial draw to score anything at all)
    train, valid = (task.split(cfg, 0, s, n) for s, n in (("train", 64), ("valid", 32)))
    spec = ModelSpec("attention", {"n_heads": 2}, BackboneConfig(16, 1, 16, 32))
    grid = [(3e-3, 0.1), (1e-3, 0.0), (1e-2, 0.1)]

    def run(stop: float):
        settings = TrainSettings(8, 32, 4, stop, 0.0, 1.0, 8)
        return sweep(spec, "lm", train, valid, grid, settings, 1, 2, torch.device("cpu"), "t", False)

    best, tries = run(1.0)  # no run reaches 1.0: every point is tried, the best by validation wins
    accs = [t["val_accuracy"] for t in tries]
    assert [(t["lr"], t["weight_decay"]) for t in tries] == grid and best.val_accuracy == max(accs) > 0
    first_best = accs.index(max(accs))
    best, tries = run(max(accs))  # the same runs (same seeds); the sweep ends at the first that reaches it
    assert [(t["lr"], t["weight_decay"]) for t in tries] == grid[:first_best + 1]
    assert (best.lr, best.weight_decay) == grid[first_best] and best.stopped_early


@pytest.mark.slow
def test_run_from_a_checkpoint_model_delegates_to_its_mixer(tmp_path):
    overrides = {**TINY, "tasks": ("mqar",), "settings": TINY["settings"].split(";")[0], "lrs": (3e-3,)}
    model = build_model(ModelSpec("attention", {"n_heads": 2}, BackboneConfig(32, 2, 64, 128)), seed=0)
    torch_state, numpy_state = torch.get_rng_state().clone(), np.random.get_state()[1].copy()
    result = _suite(overrides).run(model, SuiteContext(None, tmp_path, seed=0, progress=False))
    # training and scoring, like the generators, leave the global generators where they were
    assert torch.equal(torch.get_rng_state(), torch_state) and np.array_equal(np.random.get_state()[1], numpy_state)
    assert result.info["mixer"] == "attention" and result.info["mixer_config"] == {"n_heads": 2}
    direct = _suite(overrides).run_mixer("attention", {"n_heads": 2}, SuiteContext(None, tmp_path, 0, progress=False))
    assert [m.value for m in result.metrics] == [m.value for m in direct.metrics]  # deterministic


# ------------------------------------------------------------------------------------------- site section


@dataclass
class FakeKit:
    """The SiteKit protocol, recording what the section asked for."""

    plots: list[tuple[str, str]] = field(default_factory=list)

    def escape(self, value: Any) -> str:
        import html

        return html.escape(str(value), quote=True)

    def table(self, header, rows, caption: str = "") -> str:
        cells = "".join(f"<tr>{''.join(f'<td>{self.escape(c)}</td>' for c in row)}</tr>" for row in rows)
        return f"<table><caption>{self.escape(caption)}</caption>{cells}</table>"

    def plot(self, run, rel: str, caption: str = "") -> str:
        self.plots.append((run.run_id, rel))
        return f"<figure>{self.escape(rel)}</figure>"

    def model_label(self, run) -> str:
        return self.escape(run.run_id)

    def run_link(self, run, text: str) -> str:
        return self.escape(text)


@dataclass
class FakeRun:
    """What the section reads of a stored run (``harness.store.results.RunRecord``): id, manifest fields, metrics."""

    run_id: str
    manifest: SimpleNamespace
    metrics: list

    @property
    def plots(self) -> list[str]:
        return list(self.manifest.plots)


def _fake_run(run_id: str, mixer: str, acc: float, state: float, written: str) -> FakeRun:
    interval = Interval(max(0.0, acc - 0.01), min(1.0, acc + 0.01), "wilson")
    metrics = [
        Metric("mqar/seq64_kv4/acc", acc, True, role="score", interval=interval, chance=1 / 4096, perfect=1.0),
        Metric("mqar/seq64_kv4/state_floats", state, False),
        Metric("mqar/avg_1of3", acc, True, interval=interval),
    ]
    info = {"mixer": mixer, "mixer_config": {}, "config": {"d_model": 64},
            "settings": [{"task": "mqar", "label": "seq64_kv4", "wall_s": 12.0}]}
    return FakeRun(run_id, SimpleNamespace(suite_info=info, written_at=written, plots=(f"plots/{PLOT_NAME}",)), metrics)


def test_site_section_tables_front_and_plots():
    runs = [_fake_run("r1", "attention", 0.99, 16384, "2024-01-02"), _fake_run("r0", "attention", 0.2, 16384, "2024-01-01"),
            _fake_run("r2", "<b>mamba</b>", 0.40, 4096, "2024-01-02"), _fake_run("r3", "protot", 0.30, 8192, "2024-01-02"),
            _fake_run("r4", "tiny", 0.005, 16, "2024-01-02")]  # its interval [0, 0.015] includes chance: no front
    kit = FakeKit()
    html = site_section(runs, kit)
    assert "0.990 [0.980, 1.000]" in html and "0.200" not in html  # the newest run of a mixer only
    assert "&lt;b&gt;mamba&lt;/b&gt;" in html and "<b>mamba" not in html
    assert {r for r, _ in kit.plots} == {"r1", "r2", "r3", "r4"}
    rows = {line.split("</td><td>")[2]: line for line in html.split("<tr>")[1:] if "seq64_kv4" in line}
    assert "yes" in rows["attention"] and "yes" in rows["&lt;b&gt;mamba&lt;/b&gt;"] and "yes" not in rows["protot"]
    assert "yes" not in rows["tiny"]
    assert site_section([], kit) == ""


def test_pareto_front_by_hand():
    points = {"a": (0.9, 100.0), "b": (0.5, 10.0), "c": (0.4, 50.0), "d": (0.9, 200.0), "e": (0.5, 10.0)}
    assert pareto_front(points, x_higher=True, y_higher=False) == {"a", "b", "e"}  # accuracy up, state down
