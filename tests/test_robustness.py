"""The robustness suite: divergences against hand computations (and scipy when installed), each perturbation family
on fixed sentences, reproducible pair sets, the importer, batched scoring against a one-pair-at-a-time loop, and the
suite end to end on the tiny checkpoints."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.model.checkpoint import load_model
from harness.corpus.data import Document, load_corpus
from harness.store.storage import cache_dir
from harness.errors import ConfigError, MixbenchError
from harness.running.planned import PlannedRun
from harness.running.evaluate import EvalOptions, evaluate
from harness.registry import SUITES
from harness.store.results import ResultsStore
from harness.stats import cluster_bootstrap
from suites.robustness import PERTURBATIONS, Pair, PairSetSpec, RobustnessConfig, build_pairs, load_pairs, perturb
from suites.robustness.families import keyboard_typos
from suites.robustness.lexicons import DATA_FILES, data_path, misspellings, wordnet, wordnet_root
from suites.robustness.metrics import jsd, spearman_union, top1_agreement, topk_overlap
from suites.robustness.pairs import duplicate_counts, dumps, held_out_sentences, pair_key, save_pairs
from suites.robustness.perturbations import get_perturbation
from suites.robustness.scoring import score_pairs
from suites.robustness.suite import SliceClusters

try:
    import scipy.spatial.distance
    import scipy.stats
except ImportError:  # pragma: no cover - scipy is optional; the hand-computed cases still run
    scipy = None


# ----------------------------------------------------------------------------------------------- metrics


def test_jsd_on_hand_computed_distributions():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.5, 0.5], [0.0, 1.0, 0.0], [0.25, 0.25, 0.5]], dtype=torch.float64)
    # row 0: m = (1/4, 1/2, 1/4), KL(p||m) = KL(q||m) = 1/2 * log2(2) = 1/2; row 1: disjoint support = 1 bit
    assert jsd(p, q).tolist() == [0.5, 1.0, 0.0]
    # an asymmetric case by hand: p = (0.9, 0.1), q = (0.5, 0.5), m = (0.7, 0.3)
    a, b = torch.tensor([0.9, 0.1], dtype=torch.float64), torch.tensor([0.5, 0.5], dtype=torch.float64)
    expected = 0.5 * (0.9 * math.log2(0.9 / 0.7) + 0.1 * math.log2(0.1 / 0.3)) + 0.5 * (
        0.5 * math.log2(0.5 / 0.7) + 0.5 * math.log2(0.5 / 0.3)
    )
    assert jsd(a, b).item() == pytest.approx(expected, abs=1e-15)


@pytest.mark.skipif(scipy is None, reason="scipy not installed")
def test_jsd_matches_scipy_on_random_distributions():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 50, 300, generator=gen, dtype=torch.float64) * 3
    p, q = logits.softmax(-1)
    ours = jsd(p, q).numpy()
    ref = [scipy.spatial.distance.jensenshannon(a, b, base=2) ** 2 for a, b in zip(p.numpy(), q.numpy(), strict=True)]
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
    # float32 inputs (what the suite uses) stay close
    np.testing.assert_allclose(jsd(p.float(), q.float()).numpy(), ref, rtol=1e-4, atol=1e-6)


def test_identity_gives_exactly_zero_and_full_agreement():
    logp = torch.randn(20, 1000, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
    assert torch.equal(jsd(logp.exp(), logp.exp()), torch.zeros(20))
    assert torch.equal(top1_agreement(logp, logp), torch.ones(20, dtype=torch.float64))
    assert torch.equal(topk_overlap(logp, logp, 10), torch.ones(20, dtype=torch.float64))
    assert spearman_union(logp[0].numpy(), logp[0].numpy(), 10) == pytest.approx(1.0, abs=1e-12)


def test_topk_overlap_and_top1_by_hand():
    p = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.05, 0.03, 0.02]]))
    q = torch.log(torch.tensor([[0.02, 0.3, 0.2, 0.03, 0.05, 0.4]]))
    # top-3: {0, 1, 2} vs {5, 1, 2}
    assert topk_overlap(p, q, 3).item() == pytest.approx(2 / 3)
    assert topk_overlap(p, q, 2).item() == pytest.approx(1 / 2)  # {0, 1} vs {5, 1}
    assert top1_agreement(p, q).item() == 0.0


def test_spearman_over_the_union_of_top_k():
    p = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    q = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    # union of the top-2 sets is every token, ranked in opposite orders
    assert spearman_union(p, q, 2) == pytest.approx(-1.0)
    # top-1 of each: {0} ∪ {1}; p ranks them (2, 1), q = p with the first two swapped ranks them (1, 2)
    q2 = np.log(np.array([0.3, 0.4, 0.2, 0.1]))
    assert spearman_union(p, q2, 1) == pytest.approx(-1.0)
    if scipy is not None:
        rng = np.random.default_rng(0)
        a, b = rng.normal(size=500), rng.normal(size=500)
        union = np.union1d(np.argsort(-a)[:10], np.argsort(-b)[:10])
        assert spearman_union(a, b, 10) == pytest.approx(scipy.stats.spearmanr(a[union], b[union]).statistic)


# ----------------------------------------------------------------------------------------------- lexicons


def test_lexicons_are_vendored_with_their_licences_and_read_offline():
    sources = data_path("SOURCES.md").read_text(encoding="utf-8")
    for name in DATA_FILES:
        assert data_path(name).is_file() and f"| {name} |" in sources
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in sources and "CC BY-SA 3.0" in sources
    root = wordnet_root()  # extracted into the mixbench cache, not into an NLTK data folder
    assert root.parent == cache_dir() / "lexicons" and (root / "corpora" / "wordnet" / "data.noun").is_file()
    assert wordnet().synsets("country", "n")[0].name() == "state.n.04"


# ----------------------------------------------------------------------------------------------- families


def assert_intact(original: str, result) -> None:
    """The edits account for every difference: replaying them on the original gives the perturbed text, and each
    edit's recorded positions point at its word and its replacement."""
    rebuilt, cursor = [], 0
    for e in result.edits:
        assert original[e.start : e.end] == e.word
        assert result.text[e.new_start : e.new_start + len(e.replacement)] == e.replacement
        rebuilt += [original[cursor : e.start], e.replacement]
        cursor = e.end
    assert "".join(rebuilt) + original[cursor:] == result.text
    assert result.text != original


def sites(name: str, text: str) -> list[tuple[str, list[str]]]:
    return [(text[s.start : s.end], [o.replacement for o in s.options]) for s in get_perturbation(name).sites(text)]


FIXED = {
    "synonym": "The country will begin to build a large bridge.",
    "typo": "The economy grows.",
    "spelling": "The color of honor is 5 per cent.",
    "punctuation": "Today we face jobs, growth and prosperity, and 1,000 tasks.",
    "abbreviation": "Mr. Smith paid 20 percent in the U.S. last year.",
    "contraction": "It's been a year and I'm sure we'll win.",
    "gender": "He gave her his book and told her that his father agreed.",
    "number": "I am sure that my plan is mine.",
    "negation": "The plan will work, and we can do it.",
}


def test_every_registered_family_has_a_fixed_sentence():
    assert set(FIXED) == set(PERTURBATIONS)
    assert {PERTURBATIONS[n].kind for n in ("gender", "number", "negation")} == {"sensitivity"}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_family_edits_only_what_it_claims(name):
    text = FIXED[name]
    allowed = {(w, r) for w, options in sites(name, text) for r in options}
    outcomes = set()
    for k in range(12):
        result = perturb(name, text, seed=0, example_id=f"s{k}")
        assert_intact(text, result)
        assert all((e.word, e.replacement) in allowed for e in result.edits)
        outcomes.add(result.text)
        assert perturb(name, text, seed=0, example_id=f"s{k}") == result  # seeded by (seed, example id)
    if len(allowed) > 1 and not PERTURBATIONS[name].all_sites:
        assert len(outcomes) > 1  # different examples draw different edits (attribute flips change every site)


def test_synonym_replaces_one_content_word_with_a_wordnet_synonym():
    assert sites("synonym", FIXED["synonym"]) == [
        ("country", ["nation"]),
        ("begin", ["start"]),
        ("build", ["construct"]),
        ("large", ["big"]),
    ]
    assert sites("synonym", "The matters of state, and it matters.") == []  # never a verb-or-plural guess
    assert sites("synonym", "We are fortunate to be alive at this moment in history.") == []  # mutual first sense:
    # "instant" is first of all a blink of an eye, and the other words have no synonym that passes every check
    result = perturb("synonym", FIXED["synonym"], 0, "x")
    assert len(result.edits) == 1 and result.edits[0].op == "synonym"
    assert result.edits[0].word_index == ["The", "country", "will", "begin", "to", "build"].index(result.edits[0].word)


def test_typo_uses_keyboard_neighbours_and_codespell_misspellings():
    found = dict(sites("typo", FIXED["typo"]))
    assert "eceonomy" in found["economy"] and "eceonomy" in misspellings()["economy"]
    assert set(found["grows"]) == set(keyboard_typos("grows"))
    assert (
        "frows" in keyboard_typos("grows") and "grosw" in keyboard_typos("grows") and "gros" in keyboard_typos("grows")
    )
    assert "qrows" not in keyboard_typos("grows")  # q is nowhere near g
    for k in range(30):
        result = perturb("typo", "We form the plan.", 0, f"t{k}")
        assert result.text.split()[1] != "from"  # a slip that makes another real word is refused


def test_spelling_abbreviation_contraction_sites():
    assert sites("spelling", FIXED["spelling"]) == [
        ("color", ["colour"]),
        ("honor", ["honour"]),
        ("per cent", ["percent"]),
    ]
    assert perturb("spelling", "The cat sat on the mat.", 0, "x") is None  # nothing to change: None, not a copy
    assert sites("abbreviation", FIXED["abbreviation"]) == [
        ("Mr.", ["Mister"]),
        (" percent", ["%"]),
        ("U.S.", ["United States"]),
    ]
    assert sites("abbreviation", "He lives in the United States.") == [("United States.", ["U.S."])]
    assert sites("abbreviation", "He moved to the U.S.") == [("U.S.", ["United States."])]
    assert sites("contraction", "We do not know what it is.") == [("do not", ["don't"])]  # never "what it's."
    assert sites("contraction", FIXED["contraction"]) == [
        ("It's", ["It has"]),
        ("I'm", ["I am"]),
        ("we'll", ["we will"]),
    ]
    assert sites("punctuation", FIXED["punctuation"]) == [(",", [""]), (",", [""]), ("", [","]), ("", [","])]


def test_attribute_flips_are_consistent():
    assert (
        perturb("gender", FIXED["gender"], 0, "x").text == "She gave him her book and told him that her mother agreed."
    )
    assert perturb("number", FIXED["number"], 0, "x").text == "We are sure that our plan is ours."
    assert (
        perturb("number", "We were told that our country needs us.", 0, "x").text
        == "I was told that my country needs me."
    )
    assert sites("negation", FIXED["negation"]) == [("", [" not"]), ("can", ["cannot"])]
    assert perturb("negation", "We do not know.", 0, "x").text == "We know."
    assert sites("negation", "It isn't easy, and we don't agree.") == [("isn't", ["is"]), ("don't ", [""])]
    assert perturb("negation", "Will we win?", 0, "x") is None  # questions are not negated


# ----------------------------------------------------------------------------------------------- pair sets

DOCS = {
    "test": [
        Document("d/1", "We do not know the cost. He said his father will build it. I am sure it's been a year. "
                 "The color of the flag is red, white and blue. Mr. Smith paid 20 percent in the United States.", "t"),
        Document("d/2", "Today we face jobs, growth and prosperity. She told her husband that the economy can grow. "
                 "Our nation is strong, and we will keep it strong for our children.", "t"),
    ],
}  # fmt: skip


def test_pair_sets_are_byte_identical_for_a_seed_and_differ_across_seeds():
    sentences = held_out_sentences(DOCS, ("test",), 4, 40)
    assert [s.id for s in sentences][:2] == ["d/1#0", "d/1#1"] and len(sentences) == 8
    spec = PairSetSpec(tuple(PERTURBATIONS), 3, ("test",), 4, 40, 1, seed=0)
    first, again = dumps(build_pairs(sentences, spec)), dumps(build_pairs(list(sentences), spec))
    assert first == again
    other = dumps(build_pairs(sentences, PairSetSpec(tuple(PERTURBATIONS), 3, ("test",), 4, 40, 1, seed=1)))
    assert other != first
    pairs = build_pairs(sentences, spec)
    assert all(p.original != p.perturbed for p in pairs)
    assert {p.slice for p in pairs} == set(PERTURBATIONS)
    assert all(sum(p.slice == s for p in pairs) <= 3 for s in PERTURBATIONS)
    # a bigger set extends the smaller one: the same pairs come first
    bigger = build_pairs(sentences, PairSetSpec(tuple(PERTURBATIONS), 5, ("test",), 4, 40, 1, seed=0))
    for s in PERTURBATIONS:
        small = [p for p in pairs if p.slice == s]
        assert [p for p in bigger if p.slice == s][: len(small)] == small


def test_save_load_roundtrip_and_user_file_import(tmp_path):
    sentences = held_out_sentences(DOCS, ("test",), 4, 40)
    pairs = build_pairs(sentences, PairSetSpec(("typo", "gender"), 2, ("test",), 4, 40, 1, 0))
    save_pairs(tmp_path / "p.jsonl", pairs)
    assert load_pairs(tmp_path / "p.jsonl") == pairs
    assert (tmp_path / "p.jsonl").read_bytes() == dumps(pairs)

    user = tmp_path / "bench.jsonl"
    rows = [
        {"slice": "synonym", "original": "In the house.", "perturbed": "Inch the house.", "source": "dailydialog"},
        {"slice": "morphology", "original": "He walks.", "perturbed": "He walked.", "id": "m1"},
    ]
    user.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    loaded = load_pairs(user)
    assert [(p.id, p.slice, p.original, p.perturbed, p.edits) for p in loaded] == [
        ("synonym/1", "synonym", "In the house.", "Inch the house.", ()),
        ("m1", "morphology", "He walks.", "He walked.", ()),
    ]
    for bad, message in (
        ('{"slice": "typo", "original": "a b"}\n', "line 1 lacks non-empty string field"),
        ('{"slice": "typo", "original": "a", "perturbed": "b"}\nnot json\n', "line 2 is not JSON"),
        (
            (
                '{"slice": "t", "original": "a", "perturbed": "b", "id": "x"}\n'
                '{"slice": "t", "original": "a", "perturbed": "c", "id": "x"}\n'
            ),
            "line 2 repeats the id x",
        ),
    ):  # fmt: skip
        user.write_text(bad, encoding="utf-8")
        with pytest.raises(MixbenchError, match=message):
            load_pairs(user)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="unknown perturbation"):
        RobustnessConfig(slices=("synonym", "typos"))
    with pytest.raises(ConfigError, match="held-out splits"):
        RobustnessConfig(splits=("train",))
    assert RobustnessConfig(slices="typo,gender").slices == ("typo", "gender")  # the CLI's KEY=a,b form
    assert RobustnessConfig().pairs_per_slice >= 500


# ----------------------------------------------------------------------------------------------- scoring


@torch.no_grad()
def reference_scores(model, tokenizer, pair: Pair, k: int = 10) -> dict[str, float]:
    """One pair at a time, batch 1, float64: the definitions written out."""
    a = [tokenizer.eos_id, *tokenizer.encode(pair.original)]
    b = [tokenizer.eos_id, *tokenizer.encode(pair.perturbed)]
    la = model(torch.tensor([a]))[0][0].double().log_softmax(-1)
    lb = model(torch.tensor([b]))[0][0].double().log_softmax(-1)
    s = 0
    while s < min(len(a), len(b)) and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1

    def js(x, y):
        p, q = x.exp().numpy(), y.exp().numpy()
        m = (p + q) / 2

        def kl(u):
            return float(np.sum(np.where(u > 0, u * np.log2(np.where(u > 0, u, 1) / m), 0.0)))

        return 0.5 * (kl(p) + kl(q))

    after = [js(la[len(a) - j], lb[len(b) - j]) for j in range(1, s + 1)]
    targets = range(1, min(s, len(a) - 1, len(b) - 1) + 1)
    nll_a = -sum(la[len(a) - j - 1, a[len(a) - j]].item() for j in targets)
    nll_b = -sum(lb[len(b) - j - 1, a[len(a) - j]].item() for j in targets)
    top_a, top_b = set(la[-1].topk(k).indices.tolist()), set(lb[-1].topk(k).indices.tolist())
    return {
        "jsd_final": js(la[-1], lb[-1]),
        "jsd_after": float(np.mean(after)) if after else math.nan,
        "topk": len(top_a & top_b) / k,
        "top1": float(la[-1].argmax() == lb[-1].argmax()),
        "nll_delta": nll_b - nll_a,
        "suffix_tokens": len(targets),
    }


@pytest.fixture(scope="module")
def tiny_attention(attention_checkpoint):
    model, ckpt = load_model(attention_checkpoint)
    return model, load_corpus(ckpt.spec.data, progress=False)


def test_batched_scores_match_a_one_pair_loop(tiny_attention):
    model, corpus = tiny_attention
    pairs = [
        Pair("a", "typo", "The economy grows every year.", "The econmy grows every year."),
        Pair("b", "synonym", "We are fortunate to be alive at this moment in history.",
             "We are fortunate to be alive at this instant in history."),
        Pair("c", "punctuation", "It ends here.", "It ends here!"),  # the last token differs: nothing aligned
        Pair("d", "identity", "A sentence that does not change.", "A sentence that does not change."),
        Pair("e", "typo", "The economy grows every year.", "The economy grows evry year."),  # shares an original
    ]  # fmt: skip
    scores = score_pairs(model, corpus.tokenizer, pairs, batch_size=3, top_k=10)
    for i, pair in enumerate(pairs):
        ref = reference_scores(model, corpus.tokenizer, pair)
        for name in ("jsd_final", "jsd_after", "topk", "top1", "nll_delta", "suffix_tokens"):
            ours = getattr(scores, name)[i]
            if math.isnan(ref[name]):
                assert math.isnan(ours), (pair.id, name)
            else:
                assert ours == pytest.approx(ref[name], rel=1e-4, abs=1e-6), (pair.id, name)
    d = 3  # the identity pair compares a row with itself
    assert scores.jsd_final[d] == 0.0 and scores.jsd_after[d] == 0.0 and scores.top1[d] == 1.0
    assert scores.nll_delta[d] == 0.0
    assert not scores.routing and np.isnan(scores.route_write).all()
    # every aligned position lands in exactly one distance bucket
    n_aligned = [len(corpus.tokenizer.encode(p.original)) + 1 for p in pairs]
    assert scores.dist_count[d].sum() == n_aligned[d]
    assert scores.dist_count[2].sum() == 0


def test_routing_shift_is_recorded_for_protot(protot_checkpoint):
    model, ckpt = load_model(protot_checkpoint)
    corpus = load_corpus(ckpt.spec.data, progress=False)
    pairs = [
        Pair("a", "typo", "The economy grows every year.", "The econmy grows every year."),
        Pair("d", "identity", "A sentence that does not change.", "A sentence that does not change."),
    ]
    scores = score_pairs(model, corpus.tokenizer, pairs, batch_size=4, top_k=10)
    assert scores.routing
    assert 0 < scores.route_write[0] <= 1 and 0 < scores.route_read[0] <= 1
    assert scores.route_write[1] == 0.0 and scores.route_read[1] == 0.0


# ----------------------------------------------------------------------------------------------- end to end

SMALL = {"pairs_per_slice": 6, "bootstrap": 50, "samples_per_slice": 2}


def test_suite_end_to_end_on_both_mixers(protot_checkpoint, attention_checkpoint, tmp_path):
    store = ResultsStore(tmp_path / "results")
    runs = {
        name: evaluate(ckpt, PlannedRun.make("robustness", SMALL), store, EvalOptions(progress=False))
        for name, ckpt in (("protot", protot_checkpoint), ("attention", attention_checkpoint))
    }
    records = {name: store.read_run(out.run_id) for name, out in runs.items()}
    info = {name: r.manifest.suite_info for name, r in records.items()}
    assert info["protot"]["pairs"]["source"] == info["attention"]["pairs"]["source"]  # built once, reused
    assert Path(info["protot"]["pairs"]["source"]).is_file()
    assert info["protot"]["pairs"]["per_slice"] == {s: 6 for s in PERTURBATIONS}
    assert info["protot"]["pairs"]["unique_per_slice"] == {s: 6 for s in PERTURBATIONS}  # built pairs never repeat
    assert info["protot"]["pairs"]["duplicates"]["total"] == {"lines": 6 * len(PERTURBATIONS),
                                                              "unique": 6 * len(PERTURBATIONS), "duplicate_rate": 0.0}
    assert info["protot"]["routing"] and not info["attention"]["routing"]
    metrics = {name: {m.name: m for m in r.metrics} for name, r in records.items()}
    for name, ms in metrics.items():
        for stat in ("jsd_final", "jsd_after", "top10", "spearman", "top1", "dppl"):
            for agg in ("mean", "worst", "sensitivity"):
                assert f"{stat}/{agg}" in ms, (name, stat, agg)
        robust = [ms[f"jsd_final/{s}"].value for s in info[name]["robustness_slices"]]
        assert ms["jsd_final/mean"].value == pytest.approx(np.mean(robust))
        assert ms["jsd_final/worst"].value == pytest.approx(max(robust))
        assert ms["top1/typo"].higher_is_better and not ms["top1/negation"].higher_is_better
        assert not ms["jsd_final/typo"].higher_is_better and ms["jsd_final/gender"].higher_is_better
        assert all(0 <= ms[f"jsd_final/{s}"].value <= 1 for s in PERTURBATIONS)
    assert "route_write/mean" in metrics["protot"] and "route_write/mean" not in metrics["attention"]
    samples = records["protot"].samples
    assert len(samples) == 2 * len(PERTURBATIONS)
    assert {"original", "perturbed", "edits", "jsd_final", "next_original"} <= set(samples[0])
    headline = set(SUITES.get("robustness").cls.headline)
    assert headline - set(metrics["protot"]) == set()


def test_pair_keys_and_duplicate_counts():
    a = Pair("1", "synonym", "I live in a big house.", "I live in a large house.")
    again = Pair("2", "synonym", a.original, a.perturbed, source="elsewhere")
    other_slice = Pair("3", "typo", a.original, a.perturbed)
    swapped = Pair("4", "synonym", a.perturbed, a.original)
    assert pair_key(a) == pair_key(again) and pair_key(a).startswith("synonym/") and len(pair_key(a)) == 8 + 16
    assert len({pair_key(a), pair_key(other_slice), pair_key(swapped)}) == 3
    counts = duplicate_counts([a, again, again, other_slice, swapped])
    assert counts["per_slice"] == {"synonym": {"lines": 4, "unique": 2, "duplicate_rate": 0.5},
                                   "typo": {"lines": 1, "unique": 1, "duplicate_rate": 0.0}}
    assert counts["total"] == {"lines": 5, "unique": 3, "duplicate_rate": 0.4}


def test_slice_clusters_draw_what_cluster_bootstrap_draws():
    """The suite's vectorised resampling of unique pairs gives cluster_bootstrap's replicates for the same seed."""
    rng = np.random.default_rng(5)
    keys = np.asarray([f"synonym/{i}" for i in rng.integers(0, 23, size=140)])  # 23 pairs, repeated unevenly
    num, den = rng.random(140), (rng.random(140) > 0.2).astype(float)
    num = num * den  # a NaN entry contributes nothing
    clusters = SliceClusters.of(keys, 300, (0, 4))
    ours = clusters.replicates(num, den, np.expm1)
    ref = cluster_bootstrap([num, den], keys, lambda n, d: np.expm1(n.sum() / d.sum()), n_resamples=300, seed=(0, 4))
    assert clusters.k == len(set(keys))
    np.testing.assert_allclose(ours, ref.replicates, rtol=1e-12)
    assert SliceClusters.of(keys[:1], 300, 0).replicates(num[:1], den[:1]) is None  # one pair: no interval


def test_repeated_pairs_are_one_cluster_and_the_file_reports_its_duplicate_rate(attention_checkpoint, tmp_path,
                                                                               capsys):
    """Repeating every pair of a file ten times changes neither a number nor an interval (the cluster bootstrap
    resamples unique pairs; a bootstrap over lines would narrow by ~sqrt(10)); n counts unique pairs; the score
    carries one item per line, duplicates sharing the pair's id, whose weighted mean is the score."""
    rows = [
        {"slice": "synonym", "original": "I live in a big house.", "perturbed": "I live in a large house."},
        {"slice": "synonym", "original": "The economy grows.", "perturbed": "The economy expands."},
        {"slice": "synonym", "original": "She is very happy today.", "perturbed": "She is very glad today."},
        {"slice": "typo", "original": "He walks home.", "perturbed": "He wlaks home."},
        {"slice": "typo", "original": "We read the paper.", "perturbed": "We raed the paper."},
        {"slice": "gender", "original": "He walks home.", "perturbed": "She walks home."},
    ]
    store = ResultsStore(tmp_path / "results")
    records = {}
    for copies in (1, 10):
        path = tmp_path / f"bench{copies}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows * copies), encoding="utf-8")
        run = PlannedRun.make("robustness", {"pairs_file": str(path), "bootstrap": 200})
        out = evaluate(attention_checkpoint, run, store, EvalOptions(progress=False))
        records[copies] = store.read_run(out.run_id)
    printed = capsys.readouterr().err
    assert "bench10.jsonl: 60 lines, 6 unique pairs (duplicate rate 90.0%" in printed and "synonym 3/30" in printed
    assert "bench1.jsonl: 6 lines, 6 unique pairs (duplicate rate 0.0%" in printed
    dup = records[10].manifest.suite_info["pairs"]["duplicates"]
    assert dup["total"]["duplicate_rate"] == 0.9 and dup["per_slice"]["typo"] == {"lines": 20, "unique": 2,
                                                                                  "duplicate_rate": 0.9}
    once, ten = ({m.name: m for m in r.metrics} for r in (records[1], records[10]))
    assert set(once) == set(ten)
    for name, m in ten.items():
        assert m.value == pytest.approx(once[name].value, rel=1e-12, abs=1e-15), name
        assert m.n == once[name].n, name
        if m.interval is not None:
            assert m.interval.kind == "cluster-bootstrap", name
            assert (m.interval.low, m.interval.high) == pytest.approx(
                (once[name].interval.low, once[name].interval.high), rel=1e-9, abs=1e-12), name
    assert ten["jsd_final/synonym"].n == 3 and ten["jsd_final/mean"].n == 5 and ten["jsd_final/gender"].n == 1
    assert ten["jsd_final/mean"].interval is not None and ten["jsd_final/mean"].interval.low < ten["jsd_final/mean"].interval.high
    assert ten["jsd_final/mean"].items is None and ten["jsd_final/mean"].role == "diagnostic"
    # the score: one sentence ("He walks home.") has a flip and a keep; its ten copies are one item
    sel = ten["selectivity"]
    assert sel.role == "score" and sel.n == 1 and len(sel.items) == 1 and sel.items.ids == once["selectivity"].items.ids
    jsd = {s["slice"]: s["jsd_final"] for s in records[1].samples if s["original"] == "He walks home."}
    assert sel.value == (1.0 if jsd["gender"] > jsd["typo"] + 1e-6 else 0.0) == once["selectivity"].value


def test_suite_scores_a_user_pair_file(attention_checkpoint, tmp_path):
    path = tmp_path / "bench.jsonl"
    rows = [
        {"slice": "synonym", "original": "I live in a big house.", "perturbed": "I live in a large house."},
        {"slice": "synonym", "original": "The economy grows.", "perturbed": "The economy expands."},
        {"slice": "morphology", "original": "He walks home.", "perturbed": "He walked home."},
        {"slice": "gender", "original": "He walks home.", "perturbed": "She walks home."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = ResultsStore(tmp_path / "results")
    run = PlannedRun.make("robustness", {"pairs_file": str(path), "bootstrap": 20})
    out = evaluate(attention_checkpoint, run, store, EvalOptions(progress=False))
    record = store.read_run(out.run_id)
    names = {m.name for m in record.metrics}
    assert {"jsd_final/synonym", "jsd_final/morphology", "jsd_final/gender", "jsd_final/mean"} <= names
    assert record.manifest.suite_info["robustness_slices"] == ["synonym", "morphology"]
    assert record.manifest.suite_info["sensitivity_slices"] == ["gender"]
    with pytest.raises(ConfigError, match="does not exist"):
        missing = PlannedRun.make("robustness", {"pairs_file": str(tmp_path / "nope.jsonl")})
        evaluate(attention_checkpoint, missing, store, EvalOptions(progress=False))
