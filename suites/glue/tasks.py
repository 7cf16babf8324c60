"""The task catalogue: the nine GLUE tasks and the four offline stand-ins, each described once.

A :class:`TaskSpec` says what a task looks like (one text or a pair, classes or a regression score), how GLUE
scores it, and where each data source keeps its columns: the hub dataset ``nyu-mll/glue`` (and its parquet
snapshot, same column names), GLUE's original TSV download (``CoLA/train.tsv``...), or the vendored stand-ins.
Label ids follow the hub dataset's ``ClassLabel`` order, so every source yields the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import UnknownNameError

GLUE = "glue"
STANDIN = "standin"

#: metric suffix of each evaluation split (MNLI reports its matched and mismatched sets separately)
SPLIT_SUFFIX = {"validation": "", "validation_matched": "_matched", "validation_mismatched": "_mismatched"}


@dataclass(frozen=True)
class TsvLayout:
    """Where a task's fields sit in GLUE's original TSV files.

    ``columns`` are (text_a, text_b or None, label): header names when ``header``, else 0-based indices
    (CoLA's train/dev files have no header row).
    """

    folder: str
    files: tuple[tuple[str, str], ...]  # (split, file name)
    header: bool
    columns: tuple[str | int, str | int | None, str | int]


@dataclass(frozen=True)
class TaskSpec:
    name: str  # public name, the metric prefix
    family: str  # GLUE or STANDIN: averages never mix families
    metrics: tuple[str, ...]  # GLUE's metric(s); the task score is their mean
    labels: tuple[str, ...]  # class names in id order; () for regression
    eval_splits: tuple[str, ...]  # reported splits (keys of SPLIT_SUFFIX)
    fields: tuple[str, str | None]  # hub / parquet / stand-in column names of text_a, text_b
    hub_config: str = ""  # nyu-mll/glue config name (GLUE tasks)
    tsv: TsvLayout | None = None  # original GLUE download layout (GLUE tasks)
    standin_dir: str = ""  # folder under standin_data (stand-ins)

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def num_outputs(self) -> int:
        return 1 if self.regression else len(self.labels)

    @property
    def pair(self) -> bool:
        return self.fields[1] is not None

    def metric_names(self) -> list[str]:
        """``task/metric[_split]`` for every reported number, in a stable order."""
        return [f"{self.name}/{m}{SPLIT_SUFFIX[s]}" for s in self.eval_splits for m in self.metrics]


def _glue(name, folder, metrics, labels, fields, header, columns, eval_files=(("validation", "dev.tsv"),)):
    splits = tuple(s for s, _ in eval_files)
    layout = TsvLayout(folder, (("train", "train.tsv"), *eval_files), header, columns)
    return TaskSpec(name, GLUE, metrics, labels, splits, fields, hub_config=name, tsv=layout)


ENTAIL2 = ("entailment", "not_entailment")

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        # CoLA train/dev: source, label, original annotation, sentence; no header
        _glue("cola", "CoLA", ("mcc",), ("unacceptable", "acceptable"), ("sentence", None), False, (3, None, 1)),
        _glue("sst2", "SST-2", ("acc",), ("negative", "positive"), ("sentence", None), True,
              ("sentence", None, "label")),
        _glue("mrpc", "MRPC", ("f1", "acc"), ("not_equivalent", "equivalent"), ("sentence1", "sentence2"), True,
              ("#1 String", "#2 String", "Quality")),
        _glue("qqp", "QQP", ("f1", "acc"), ("not_duplicate", "duplicate"), ("question1", "question2"), True,
              ("question1", "question2", "is_duplicate")),
        _glue("stsb", "STS-B", ("pearson", "spearman"), (), ("sentence1", "sentence2"), True,
              ("sentence1", "sentence2", "score")),
        _glue("mnli", "MNLI", ("acc",), ("entailment", "neutral", "contradiction"), ("premise", "hypothesis"), True,
              ("sentence1", "sentence2", "gold_label"),
              (("validation_matched", "dev_matched.tsv"), ("validation_mismatched", "dev_mismatched.tsv"))),
        _glue("qnli", "QNLI", ("acc",), ENTAIL2, ("question", "sentence"), True, ("question", "sentence", "label")),
        _glue("rte", "RTE", ("acc",), ENTAIL2, ("sentence1", "sentence2"), True, ("sentence1", "sentence2", "label")),
        _glue("wnli", "WNLI", ("acc",), ("not_entailment", "entailment"), ("sentence1", "sentence2"), True,
              ("sentence1", "sentence2", "label")),
        TaskSpec("standin-sentiment", STANDIN, ("acc",), ("negative", "positive"), ("validation",),
                 ("sentence", None), standin_dir="sentiment"),
        TaskSpec("standin-acceptability", STANDIN, ("mcc",), ("unacceptable", "acceptable"), ("validation",),
                 ("sentence", None), standin_dir="acceptability"),
        TaskSpec("standin-fact-nli", STANDIN, ("acc",), ("entailment", "neutral", "contradiction"), ("validation",),
                 ("premise", "hypothesis"), standin_dir="fact_nli"),
        TaskSpec("standin-epistemic-nli", STANDIN, ("acc",), ("entailment", "non-entailment"), ("validation",),
                 ("premise", "hypothesis"), standin_dir="epistemic_nli"),
    )
}  # fmt: skip

FAMILY_SIZE = {family: sum(t.family == family for t in TASKS.values()) for family in (GLUE, STANDIN)}
#: ``tasks=glue`` / ``tasks=standin`` select a whole family
ALIASES = {family: tuple(n for n, t in TASKS.items() if t.family == family) for family in (GLUE, STANDIN)}


def get_task(name: str) -> TaskSpec:
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownNameError("glue task", name, [*TASKS, *ALIASES]) from None


def expand_tasks(names: tuple[str, ...]) -> tuple[str, ...]:
    """Task names with the family aliases expanded, duplicates dropped, order kept; unknown names fail."""
    out: list[str] = []
    for name in names:
        for task in ALIASES.get(name, (name,)):
            get_task(task)
            if task not in out:
                out.append(task)
    return tuple(out)


def average_name(family: str, n_tasks: int) -> str:
    """``glue/avg`` over the whole family; ``glue/avg_3of9`` over part of it, so partial averages never share a
    leaderboard column with the full one."""
    total = FAMILY_SIZE[family]
    return f"{family}/avg" if n_tasks == total else f"{family}/avg_{n_tasks}of{total}"


def headline_metrics() -> tuple[str, ...]:
    """Every per-task GLUE metric and every average name the suite can report."""
    names = [m for t in TASKS.values() for m in t.metric_names()]
    for family, total in FAMILY_SIZE.items():
        names += [average_name(family, k) for k in range(total, 1, -1)]
    return tuple(names)
