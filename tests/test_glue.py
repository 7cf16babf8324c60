"""The glue suite: every GLUE file layout and task shape, metrics against scikit-learn / scipy, CIs against
scipy's t quantile, padding exactness for every mixer, and fine-tuning end to end on a tiny checkpoint."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn import metrics as skm

from harness.model.backbone import build_model
from harness.model.checkpoint import load_model
from harness.cli import main
from harness.corpus.data import load_corpus
from harness.errors import ConfigError, UnknownNameError
from harness.registry import MIXERS, SUITES
from harness.model.specs import make_run_spec
from harness.suite import SuiteContext
from suites.glue.config import GlueConfig
from suites.glue.finetune import SequenceClassifier, collate
from suites.glue.loading import Example, load_task
from suites.glue.metrics import METRICS
from suites.glue.suite import Glue, TaskOutcome
from suites.glue.tasks import TASKS

# ------------------------------------------------------------------------------------ fixture files (GLUE TSV)

MNLI_HEAD = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]  # fmt: skip


def mnli_rows(rows, dev: bool):
    """MNLI's real columns: train has label1 + gold_label, dev files label1..label5 + gold_label."""
    labels = ["label1", "label2", "label3", "label4", "label5"] if dev else ["label1"]
    head = "\t".join([*MNLI_HEAD, *labels, "gold_label"])
    body = ["\t".join([str(i), "1", "1e", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)", p, h, *[g] * len(labels), g])
            for i, (p, h, g) in enumerate(rows)]  # fmt: skip
    return "\n".join([head, *body]) + "\n"


# Each task: files in GLUE's original layout, and the examples they must load as (text_a, text_b, label) per split.
GLUE_FILES = {
    "cola": {  # no header; columns: source, label, original annotation, sentence
        "CoLA/train.tsv": "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
                          "gj04\t0\t*\tThey drank the pub.\n",
        "CoLA/dev.tsv": "gj04\t1\t\tThe sailors rode the breeze clear of the rocks.\n",
    },
    "sst2": {
        "SST-2/train.tsv": "sentence\tlabel\nhide new secretions from the parental units \t0\nhe said \"wow\t1\n",
        "SST-2/dev.tsv": "sentence\tlabel\nit 's a charming and often affecting journey . \t1\n",
    },
    "mrpc": {  # the MRPC files start with a byte-order mark
        "MRPC/train.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\tAmrozi accused his brother.\t"
                          "Referring to him, Amrozi accused his brother.\n0\t2108705\t2108831\tYucaipa owned Dominick 's.\tYucaipa bought it.\n",
        "MRPC/dev.tsv": "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tHe said.\tHe stated.\n",
    },
    "qqp": {  # one malformed row (too few fields), as in the real file
        "QQP/train.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                         "133273\t213221\t213222\tHow is the life of a math student?\tWhich level of prepration is enough?\t0\n"
                         "402555\t536040\n"
                         "1\t3\t4\tWhy is the sky blue?\tWhat makes the sky blue?\t1\n",
        "QQP/dev.tsv": "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n5\t6\t7\tA?\tB?\t1\n",
    },
    "stsb": {
        "STS-B/train.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                           "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off.\t5.000\n"
                           "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a flute.\tA man is eating.\t0.600\n",
        "STS-B/dev.tsv": "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                         "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man with a hard hat is dancing.\tA man is dancing.\t3.800\n",
    },
    "mnli": {
        "MNLI/train.tsv": mnli_rows([("Conceptually cream skimming has two dimensions.", "Product and geography.", "neutral"),
                                     ("you know during the season", "You lose the things.", "entailment")], dev=False),
        "MNLI/dev_matched.tsv": mnli_rows([("The new rights are nice enough", "Everyone really likes them.", "contradiction")], dev=True),
        "MNLI/dev_mismatched.tsv": mnli_rows([("Your contribution helped.", "It helped.", "entailment"),
                                              ("x", "y", "-")], dev=True),  # no gold label: unusable
    },
    "qnli": {
        "QNLI/train.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen did it open?\tIt opened in 1990.\tentailment\n"
                          "1\tWho?\tNobody knows where.\tnot_entailment\n",
        "QNLI/dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhat?\tThis.\tnot_entailment\n",
    },
    "rte": {
        "RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tNo weapons were found.\tWeapons were found.\tnot_entailment\n",
        "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tDana Reeve died.\tReeve is dead.\tentailment\n",
    },
    "wnli": {
        "WNLI/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin through a carrot.\tThe carrot had a hole.\t1\n",
        "WNLI/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tThe drain is clogged.\tThe hair is clogged.\t0\n",
    },
}  # fmt: skip

EXPECTED = {
    "cola": {"train": [("Our friends won't buy this analysis, let alone the next one we propose.", None, 1),
                       ("They drank the pub.", None, 0)],
             "validation": [("The sailors rode the breeze clear of the rocks.", None, 1)]},
    "sst2": {"train": [("hide new secretions from the parental units ", None, 0), ('he said "wow', None, 1)],
             "validation": [("it 's a charming and often affecting journey . ", None, 1)]},
    "mrpc": {"train": [("Amrozi accused his brother.", "Referring to him, Amrozi accused his brother.", 1),
                       ("Yucaipa owned Dominick 's.", "Yucaipa bought it.", 0)],
             "validation": [("He said.", "He stated.", 1)]},
    "qqp": {"train": [("How is the life of a math student?", "Which level of prepration is enough?", 0),
                      ("Why is the sky blue?", "What makes the sky blue?", 1)],
            "validation": [("A?", "B?", 1)]},
    "stsb": {"train": [("A plane is taking off.", "An air plane is taking off.", 5.0),
                       ("A man is playing a flute.", "A man is eating.", 0.6)],
             "validation": [("A man with a hard hat is dancing.", "A man is dancing.", 3.8)]},
    "mnli": {"train": [("Conceptually cream skimming has two dimensions.", "Product and geography.", 1),
                       ("you know during the season", "You lose the things.", 0)],
             "validation_matched": [("The new rights are nice enough", "Everyone really likes them.", 2)],
             "validation_mismatched": [("Your contribution helped.", "It helped.", 0)]},
    "qnli": {"train": [("When did it open?", "It opened in 1990.", 0), ("Who?", "Nobody knows where.", 1)],
             "validation": [("What?", "This.", 1)]},
    "rte": {"train": [("No weapons were found.", "Weapons were found.", 1)],
            "validation": [("Dana Reeve died.", "Reeve is dead.", 0)]},
    "wnli": {"train": [("I stuck a pin through a carrot.", "The carrot had a hole.", 1)],
             "validation": [("The drain is clogged.", "The hair is clogged.", 0)]},
}  # fmt: skip


def write_files(root, files: dict[str, str]):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def as_tuples(examples: list[Example]):
    return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task", list(GLUE_FILES))
def test_glue_tsv_layout_loads_every_task_shape(task, tmp_path):
    data = load_task(TASKS[task], str(write_files(tmp_path, GLUE_FILES[task])))
    expected = EXPECTED[task]
    assert as_tuples(data.train) == expected["train"]
    assert {split: as_tuples(x) for split, x in data.evals.items()} == {s: v for s, v in expected.items() if s != "train"}
    assert data.source.startswith("tsv:")
    assert data.skipped == {"qqp": {"train": 1}, "mnli": {"validation_mismatched": 1}}.get(task, {})


def test_parquet_snapshot_layout_matches_the_tsv_layout(tmp_path):
    """The hub dataset's parquet files (``mnli/validation_matched-00000-of-00001.parquet``...) load the same
    examples, with the hub's column names and label ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "mnli"
    folder.mkdir()
    for split, rows in EXPECTED["mnli"].items():
        premise, hypothesis, label = zip(*rows, strict=True)
        table = pa.table({"premise": premise, "hypothesis": hypothesis, "label": label, "idx": list(range(len(rows)))})
        pq.write_table(table, folder / f"{split}-00000-of-00001.parquet")
    data = load_task(TASKS["mnli"], str(tmp_path))
    assert data.source.startswith("parquet:")
    assert as_tuples(data.train) == EXPECTED["mnli"]["train"]
    assert {s: as_tuples(x) for s, x in data.evals.items()} == {s: v for s, v in EXPECTED["mnli"].items() if s != "train"}


def test_hub_source_reads_the_hub_columns(monkeypatch):
    """The hub path (``datasets.load_dataset("nyu-mll/glue", "mnli")``), with the loader replaced by the same
    splits and columns the hub dataset has, so no network is needed."""
    import datasets

    def fake_load_dataset(path, name):
        assert (path, name) == ("nyu-mll/glue", "mnli")
        return datasets.DatasetDict({
            split: datasets.Dataset.from_dict({"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows],
                                               "label": [r[2] for r in rows], "idx": list(range(len(rows)))})
            for split, rows in [*EXPECTED["mnli"].items(), ("test_matched", [("a", "b", -1)])]
        })  # fmt: skip

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = load_task(TASKS["mnli"])
    assert data.source == "hub:nyu-mll/glue/mnli"
    assert as_tuples(data.train) == EXPECTED["mnli"]["train"]
    assert {s: as_tuples(x) for s, x in data.evals.items()} == {s: v for s, v in EXPECTED["mnli"].items() if s != "train"}


def test_missing_layout_says_what_to_provide(tmp_path):
    with pytest.raises(Exception, match="CoLA/train.tsv .* cola/train-\\*.parquet"):
        load_task(TASKS["cola"], str(tmp_path))


def test_vendored_standins_have_the_documented_sizes_and_labels():
    sizes = {"standin-sentiment": (29184, 3648), "standin-acceptability": (77611, 9702),
             "standin-fact-nli": (24000, 3000), "standin-epistemic-nli": (1600, 200)}  # fmt: skip
    for name, (n_train, n_val) in sizes.items():
        spec, data = TASKS[name], load_task(TASKS[name])
        assert (len(data.train), len(data.evals["validation"])) == (n_train, n_val) and not data.skipped
        assert {e.label for e in data.train} == set(range(len(spec.labels)))
        assert all((e.text_b is not None) == spec.pair for e in data.train[:100])


# ----------------------------------------------------------------------------------------------- metrics


def test_metrics_match_scikit_learn_and_scipy():
    rng = np.random.default_rng(0)
    y2, p2 = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    p2[:300] = y2[:300]  # informative but imperfect
    y3, p3 = rng.integers(0, 3, 500), rng.integers(0, 3, 500)
    p3[:200] = y3[:200]
    assert METRICS["acc"](y2, p2) == pytest.approx(skm.accuracy_score(y2, p2), abs=1e-12)
    assert METRICS["f1"](y2, p2) == pytest.approx(skm.f1_score(y2, p2), abs=1e-12)
    assert METRICS["mcc"](y2, p2) == pytest.approx(skm.matthews_corrcoef(y2, p2), abs=1e-12)
    assert METRICS["mcc"](y3, p3) == pytest.approx(skm.matthews_corrcoef(y3, p3), abs=1e-12)
    assert METRICS["mcc"](y2, np.ones_like(y2)) == skm.matthews_corrcoef(y2, np.ones_like(y2)) == 0.0
    assert METRICS["f1"](np.zeros(5, int), np.zeros(5, int)) == skm.f1_score(np.zeros(5), np.zeros(5), zero_division=0)
    scores = np.round(rng.uniform(0, 5, 300), 1)  # ties, as STS-B's scores have
    pred = np.round(scores + rng.normal(0, 1.5, 300), 1)
    assert METRICS["pearson"](scores, pred) == pytest.approx(stats.pearsonr(scores, pred)[0], abs=1e-12)
    assert METRICS["spearman"](scores, pred) == pytest.approx(stats.spearmanr(scores, pred)[0], abs=1e-12)
    assert METRICS["pearson"](scores, np.full(300, 2.0)) == 0.0  # constant prediction: no information


def outcome(name: str, per_seed: list[list[float]]) -> TaskOutcome:
    spec = TASKS[name]
    names = spec.metric_names()
    return TaskOutcome(spec, [dict(zip(names, vals, strict=True)) for vals in per_seed], None, {n: 10 for n in names}, {}, {}, {})


def test_averages_follow_glue_and_never_mix_families():
    """Task score = mean of the task's metrics (F1/acc, Pearson/Spearman, MNLI m/mm); average = mean of task
    scores per seed, then a Student-t 95% interval over seeds; stand-ins get their own average."""
    glue = [outcome("mrpc", [[80, 70], [84, 72]]), outcome("stsb", [[60, 50], [70, 64]]),
            outcome("mnli", [[50, 52], [54, 56]]), outcome("cola", [[10], [20]])]  # fmt: skip
    standin = [outcome("standin-sentiment", [[70], [74]]), outcome("standin-fact-nli", [[40], [44]])]
    suite = Glue(GlueConfig(tasks=("mrpc", "stsb", "mnli", "cola", "standin-sentiment", "standin-fact-nli")))
    metrics = {m.name: m for m in suite._averages(glue + standin)}
    assert set(metrics) == {"glue/avg_4of9", "standin/avg_2of4"}
    per_seed = [np.mean([75, 55, 51, 10]), np.mean([78, 67, 55, 20])]
    half = stats.t.ppf(0.975, 1) * np.std(per_seed, ddof=1) / math.sqrt(2)
    m = metrics["glue/avg_4of9"]
    assert (m.value, m.ci_low, m.ci_high, m.n) == pytest.approx((np.mean(per_seed), np.mean(per_seed) - half, np.mean(per_seed) + half, 4))
    assert metrics["standin/avg_2of4"].value == pytest.approx(np.mean([55, 59]))
    assert "glue/avg" in Glue.headline and "glue/avg_4of9" in Glue.headline and "standin/avg" in Glue.headline


def test_one_seed_average_interval_resamples_each_task():
    """With one seed the average's interval is the percentile interval of the mean of the tasks' bootstrap
    replicates of their scores (each task's examples resampled on their own)."""
    rng = np.random.default_rng(0)
    a, b = outcome("mrpc", [[80, 70]]), outcome("rte", [[60]])
    a.replicates = {"mrpc/f1": rng.normal(80, 2, 500), "mrpc/acc": rng.normal(70, 2, 500)}
    b.replicates = {"rte/acc": rng.normal(60, 3, 500)}
    (m,) = Glue(GlueConfig(tasks=("mrpc", "rte")))._averages([a, b])
    means = ((a.replicates["mrpc/f1"] + a.replicates["mrpc/acc"]) / 2 + b.replicates["rte/acc"]) / 2
    assert m.name == "glue/avg_2of9" and m.value == pytest.approx(67.5)
    assert (m.ci_low, m.ci_high) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])))


# ------------------------------------------------------------------------------------------------ config


def test_config_parses_cli_values_and_rejects_bad_ones():
    entry = SUITES.get("glue")
    cfg = entry.make_config({"tasks": "standin,cola", "lrs": "1e-3,3e-4", "seeds": 0})
    assert cfg.tasks == (*[n for n in TASKS if n.startswith("standin-")], "cola")
    assert cfg.lrs == (1e-3, 3e-4) and cfg.seeds == (0,)
    assert entry.make_config({}).tasks == tuple(n for n in TASKS if n.startswith("standin-"))  # offline default
    with pytest.raises(UnknownNameError, match="Did you mean 'standin-sentiment'"):
        GlueConfig(tasks="standin-sentimnt")
    for bad in ({"pooling": "max"}, {"lrs": "fast"}, {"seeds": "0,0"}, {"dev_fraction": 1.0}, {"epochs": 0}):
        with pytest.raises(ConfigError):
            entry.make_config(bad)


def test_glue_tasks_offline_without_a_data_dir_fail_before_any_work(protot_checkpoint, tmp_path, capsys):
    args = ["eval", "--suite", "glue", "--checkpoint", str(protot_checkpoint), "--suite-config", "tasks=sst2,rte",
            "--results", str(tmp_path / "r"), "--no-progress"]  # fmt: skip
    assert main(args) == 2
    assert "data_dir=FOLDER" in capsys.readouterr().err and not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------------------- fine-tuning


def tiny_spec(mixer: str):
    return make_run_spec(mixer, "tiny").model


# The built-in mixers only: other test modules register throw-away mixers into the same registry at import.
BUILT_IN = [name for name in MIXERS.names() if MIXERS.get(name).cls.__module__.startswith("mixers.")]


@pytest.mark.parametrize("mixer", BUILT_IN)
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_right_padding_does_not_change_the_pooled_output(mixer, pooling):
    """Every registered mixer (recurrent ones too) gives the same head output for a sequence alone and padded
    in a batch with a longer one."""
    model = build_model(tiny_spec(mixer), seed=0).eval()
    clf = SequenceClassifier(model, 3, pooling, 0.0).eval()
    rng = np.random.default_rng(0)
    seqs = [rng.integers(2, 500, 9), rng.integers(2, 500, 23), rng.integers(2, 500, 16)]
    with torch.no_grad():
        ids, lengths = collate(seqs, pad_id=1)
        batched = clf(ids, lengths)
        for i, s in enumerate(seqs):
            alone = clf(torch.from_numpy(s)[None], torch.tensor([len(s)]))
            torch.testing.assert_close(batched[i : i + 1], alone, rtol=1e-4, atol=1e-5)


def learnable_sst2(root, n_train=64, n_dev=48):
    """SST-2 layout; the label is which of two words ends the sentence, so a tiny model can learn it."""
    rng = np.random.default_rng(1)
    words = ["the", "film", "was", "very", "quite", "a", "story", "plot", "and", "it"]

    def rows(n):
        out = []
        for _ in range(n):
            label = int(rng.integers(0, 2))
            filler = " ".join(rng.choice(words, int(rng.integers(2, 9))))
            out.append(f"{filler} {'excellent' if label else 'terrible'}\t{label}")
        return "sentence\tlabel\n" + "\n".join(out) + "\n"

    stsb_head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    stsb = [f"{i}\tg\tf\t2012\t{i}\tn\tn\t{' '.join(rng.choice(words, 4))}\t{' '.join(rng.choice(words, 4))}\t{rng.uniform(0, 5):.2f}"
            for i in range(n_train + n_dev)]  # fmt: skip
    return write_files(root, {
        "SST-2/train.tsv": rows(n_train), "SST-2/dev.tsv": rows(n_dev),
        "STS-B/train.tsv": stsb_head + "\n".join(stsb[:n_train]) + "\n", "STS-B/dev.tsv": stsb_head + "\n".join(stsb[n_train:]) + "\n",
    })  # fmt: skip


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_fine_tuning_end_to_end_on_a_tiny_checkpoint(protot_checkpoint, tmp_path):
    model, ckpt = load_model(protot_checkpoint)
    corpus = load_corpus(ckpt.spec.data, progress=False)
    before = weights(model)
    cfg = GlueConfig(tasks=("sst2", "stsb"), data_dir=str(learnable_sst2(tmp_path)), lrs=(3e-3, 1e-4), seeds=(0, 1),
                     epochs=4, batch_size=16, dev_fraction=0.25, pooling="mean")  # fmt: skip
    result = Glue(cfg).run(model, SuiteContext(corpus, tmp_path, progress=False))
    for k, v in weights(model).items():
        assert torch.equal(v, before[k]), f"the suite changed the pretrained model ({k})"
    metrics = {m.name: m for m in result.metrics}
    assert set(metrics) == {"sst2/acc", "sst2/majority_acc", "stsb/pearson", "stsb/spearman", "glue/avg_2of9"}
    info = result.info["tasks"]
    assert info["sst2"]["examples"] == {"train_split": 64, "fit": 48, "dev": 16, "validation": 48}
    assert set(info["sst2"]["dev_scores"]) == {"0.003", "0.0001"}
    assert info["sst2"]["lr"] == max((3e-3, 1e-4), key=lambda lr: info["sst2"]["dev_scores"][f"{lr:g}"])
    # CI: Student-t over the two seeds' values, against scipy's quantile
    seeds = [info["sst2"]["per_seed"][s]["sst2/acc"] for s in ("0", "1")]
    half = stats.t.ppf(0.975, 1) * np.std(seeds, ddof=1) / math.sqrt(2)
    acc = metrics["sst2/acc"]
    assert (acc.value, acc.ci_low, acc.ci_high, acc.n) == pytest.approx((np.mean(seeds), np.mean(seeds) - half, np.mean(seeds) + half, 48))
    # the majority rate is the validation accuracy of the training fit's most frequent label
    labels = np.array([int(line.rsplit("\t", 1)[1]) for line in (tmp_path / "SST-2/dev.tsv").read_text().splitlines()[1:]])
    majority = TASKS["sst2"].labels.index(info["sst2"]["majority_label"])
    assert metrics["sst2/majority_acc"].value == pytest.approx(100 * np.mean(labels == majority))
    assert acc.value > metrics["sst2/majority_acc"].value + 15  # the cue is learnt
    sts = [np.mean([info["stsb"]["per_seed"][s][m] for m in ("stsb/pearson", "stsb/spearman")]) for s in ("0", "1")]
    assert metrics["glue/avg_2of9"].value == pytest.approx(np.mean([(a + b) / 2 for a, b in zip(seeds, sts, strict=True)]))


def test_one_seed_gets_a_bootstrap_interval_over_examples(attention_checkpoint, tmp_path):
    model, ckpt = load_model(attention_checkpoint)
    corpus = load_corpus(ckpt.spec.data, progress=False)
    cfg = GlueConfig(tasks=("sst2",), data_dir=str(learnable_sst2(tmp_path)), lrs=(3e-3,), seeds=(0,), epochs=2,
                     batch_size=16, bootstrap=200, max_eval_examples=40)  # fmt: skip
    result = Glue(cfg).run(model, SuiteContext(corpus, tmp_path, progress=False))
    acc = next(m for m in result.metrics if m.name == "sst2/acc")
    assert acc.n == 40 and acc.ci_low <= acc.value <= acc.ci_high and acc.ci_high - acc.ci_low > 0
    assert result.info["tasks"]["sst2"]["dev_scores"] == {}  # one rate: nothing to select


def test_cli_eval_on_a_vendored_standin_reaches_the_leaderboard(protot_checkpoint, tmp_path, capsys):
    results = tmp_path / "results"
    config = ["tasks=standin-sentiment", "max_train_examples=64", "max_eval_examples=64", "epochs=1", "lrs=1e-3", "seeds=0"]
    args = ["eval", "--suite", "glue", "--checkpoint", str(protot_checkpoint), "--suite-config", *config,
            "--results", str(results), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(results), "--format", "json", "--all"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    (acc,) = [c for name, c in row["cells"].items() if name.endswith("/standin-sentiment/acc")]
    assert acc["value"] is not None and acc["role"] == "score" and acc["chance"] is not None
    assert not any("/sst2/" in k or "/glue/" in k for k in row["cells"])  # a stand-in is never reported as GLUE
