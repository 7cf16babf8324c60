"""The task catalogue: each task's config class, generator, base and full difficulty grids, and how a model
reads it out (docs/synthetic.md, "Tasks" and "Difficulty grids").

A *setting* is one config of one task (MQAR at (seq 128, 8 pairs); in-context recall with vocabulary 64). Its
label names its metrics (``mqar/seq128_kv8/acc``, ``in-context-recall/vocab64/acc``): MQAR settings are labelled
by their length and pairs, MAD settings by how they differ from MAD's baseline (``base`` for the baseline),
state-tracking settings by their trained length and what else differs (``parity/seq32``, ``mod-add/seq32_mod7``).

Tasks form groups (:data:`GROUPS`): ``recall`` (MQAR and MAD's six, the suite's default) and ``state-tracking``
(parity, modular addition, S3 and S5 word problems: opt-in, docs/state_tracking.md). A group's name may stand for
its tasks wherever tasks are named (``tasks=state-tracking``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.errors import ConfigError, UnknownNameError
from suites.synthetic import mad, state_tracking
from suites.synthetic.data import TaskData, split_rng
from suites.synthetic.mqar import MQARConfig, generate_mqar

#: how a model's output is read: ``lm`` - the tied LM head at each target position; ``compression`` - a decoder
#: that sees only the model's output at the last (compression) token
HEADS = ("lm", "compression")

#: short names of config fields in setting labels
SHORT = {
    "vocab_size": "vocab", "seq_len": "seq", "num_train_examples": "train", "frac_noise": "noise",
    "noise_vocab_size": "noisevocab", "num_tokens_to_copy": "copy", "k_motif_size": "kmotif",
    "v_motif_size": "vmotif", "num_kv_pairs": "kv", "power_a": "a", "modulus": "mod",
}

RECALL, STATE_TRACKING = "recall", "state-tracking"


@dataclass(frozen=True)
class TaskSpec:
    name: str
    config_cls: type
    generate: Callable[..., TaskData]
    #: the settings of the ``base`` grid and of the ``full`` grid, as overrides of the config's defaults
    base: tuple[dict[str, Any], ...]
    full: tuple[dict[str, Any], ...]
    head: str
    source: str
    #: the task group (:data:`GROUPS`): ``recall`` or ``state-tracking``
    group: str = RECALL
    #: every answer is due one position after its cue, so a one-token look-back (which a short convolution gives
    #: for free) is all the mixing it needs: its accuracy is a diagnostic, never a vote (docs/protocol.md)
    one_token_lookback: bool = False

    @property
    def state_tracking(self) -> bool:
        return self.group == STATE_TRACKING

    def make(self, overrides: dict[str, Any]) -> Any:
        fields = {f.name: f for f in dataclasses.fields(self.config_cls)}
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise ConfigError(f"synthetic: task {self.name} has no field(s) {', '.join(unknown)}; its fields are "
                              f"{', '.join(fields)}.")
        return self.config_cls(**overrides)

    def settings(self, grid: str) -> list[Any]:
        return [self.make(o) for o in (self.base if grid == "base" else self.full)]

    def label(self, cfg: Any) -> str:
        """``seq128_kv8`` for MQAR; for MAD tasks the fields that differ from the baseline (``vocab64``), or
        ``base``."""
        default = self.config_cls()
        parts = []
        if self.name == "mqar":
            parts = [f"seq{cfg.seq_len}", f"kv{cfg.num_kv_pairs}"]
            skip = {"seq_len", "num_kv_pairs"}
        elif self.state_tracking:
            parts, skip = [f"seq{cfg.seq_len}"], {"seq_len"}
        else:
            skip = set()
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if f.name not in skip and value != getattr(default, f.name):
                parts.append(f"{SHORT.get(f.name, f.name)}{value:g}" if isinstance(value, float)
                             else f"{SHORT.get(f.name, f.name)}{value}")
        return "_".join(parts) or "base"

    def train_examples(self, cfg: Any) -> int:
        return cfg.train_examples if self.name == "mqar" else cfg.num_train_examples

    def chance(self, cfg: Any) -> float:
        """Accuracy of guessing uniformly over the tokens a target can be."""
        return 1.0 / cfg.value_vocab if self.name == "mqar" else cfg.chance

    def split(self, cfg: Any, seed: int, split: str, n: int) -> TaskData:
        """``n`` examples of one split; train examples in training form (MAD's ``is_training``)."""
        rng = split_rng(self.name, cfg, seed, split)
        if self.name == "memorization":  # the facts are shared by every split of a setting
            facts = mad.memorization_facts(cfg, split_rng(self.name, cfg, seed, "facts"))
            return self.generate(cfg, n, rng, split == "train", facts)
        return self.generate(cfg, n, rng, split == "train")


def _mad_full(changes: dict[str, tuple[Any, ...]]) -> tuple[dict[str, Any], ...]:
    """MAD's benchmark grid: the baseline, then each axis varied alone (``make_benchmark_mad_configs``)."""
    return ({},) + tuple({axis: v} for axis, values in changes.items() for v in values)


_MAD_TRAIN_AXIS = (6400, 3200, 1600, 800)
#: state tracking's full grid: the base (trained at 32) and longer trained lengths
_STATE_FULL = ({}, {"seq_len": 64}, {"seq_len": 128})

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec(
            "mqar", MQARConfig, generate_mqar,
            base=({"seq_len": 64, "num_kv_pairs": 4},
                  {"seq_len": 128, "num_kv_pairs": 8},
                  {"seq_len": 256, "num_kv_pairs": 16}),
            full=({"seq_len": 64, "num_kv_pairs": 4},
                  {"seq_len": 128, "num_kv_pairs": 8},
                  {"seq_len": 256, "num_kv_pairs": 16},
                  {"seq_len": 256, "num_kv_pairs": 32},
                  {"seq_len": 256, "num_kv_pairs": 64}),
            head="lm", source="zoology zoology/data/multiquery_ar.py; mqar_example_configs/original_mqar_configs.py",
        ),
        TaskSpec(
            "in-context-recall", mad.InContextRecallConfig, mad.generate_recall, base=({},),
            full=_mad_full({"vocab_size": (32, 64, 128), "seq_len": (256, 512, 1024),
                            "num_train_examples": _MAD_TRAIN_AXIS}),
            head="lm", source="mad-lab mad/data/instances.py; configs/tasks/in-context-recall.yml",
        ),
        TaskSpec(
            "fuzzy-recall", mad.FuzzyRecallConfig, mad.generate_fuzzy_recall, base=({},),
            full=_mad_full({"vocab_size": (32, 64, 128), "seq_len": (256, 512, 1024),
                            "num_train_examples": _MAD_TRAIN_AXIS}),
            head="lm", source="mad-lab mad/data/instances.py; configs/tasks/fuzzy-in-context-recall.yml",
        ),
        TaskSpec(
            "noisy-recall", mad.NoisyRecallConfig, mad.generate_recall, base=({},),
            full=_mad_full({"vocab_size": (48, 80, 144), "seq_len": (256, 512, 1024),
                            "num_train_examples": _MAD_TRAIN_AXIS, "frac_noise": (0.4, 0.6, 0.8)}),
            head="lm", source="mad-lab mad/data/instances.py; configs/tasks/noisy-in-context-recall.yml",
        ),
        TaskSpec(
            "selective-copy", mad.SelectiveCopyConfig, mad.generate_selective_copy, base=({},),
            full=_mad_full({"vocab_size": (32, 64, 128), "seq_len": (512, 1024),
                            "num_train_examples": _MAD_TRAIN_AXIS, "num_tokens_to_copy": (32, 64, 96)}),
            head="lm", source="mad-lab mad/data/instances.py; configs/tasks/selective-copying.yml",
        ),
        TaskSpec(
            "compression", mad.CompressionConfig, mad.generate_compression, base=({},),
            full=_mad_full({"vocab_size": (32, 64, 128), "seq_len": (64, 128, 256),
                            "num_train_examples": _MAD_TRAIN_AXIS}),
            head="compression", source="mad-lab mad/data/instances.py, mad/model/auto_encoder.py; "
                                       "configs/tasks/compression.yml",
        ),
        TaskSpec(
            "memorization", mad.MemorizationConfig, mad.generate_memorization, base=({},),
            full=_mad_full({"vocab_size": (512, 1024, 2048, 4096, 8192)}),
            head="lm", source="mad-lab mad/data/instances.py; configs/tasks/memorization.yml", one_token_lookback=True,
        ),
        TaskSpec(
            "parity", state_tracking.ParityConfig, state_tracking.generate_word_problem, base=({},),
            full=_STATE_FULL, head="lm", group=STATE_TRACKING,
            source="Deletang et al. 2023 (parity check); Grazzi et al. 2025, Figure 1 (trained up to 40, tested "
                   "40-256); labels at every position",
        ),
        TaskSpec(
            "mod-add", state_tracking.ModAddConfig, state_tracking.generate_word_problem, base=({},),
            full=_STATE_FULL + ({"modulus": 3}, {"modulus": 7}), head="lm", group=STATE_TRACKING,
            source="the cyclic group Z_m word problem (running sum mod m; m = 5 as in Deletang et al. 2023's "
                   "modular arithmetic, which also has operators this task leaves out)",
        ),
        TaskSpec(
            "s3", state_tracking.S3Config, state_tracking.generate_word_problem, base=({},), full=_STATE_FULL,
            head="lm", group=STATE_TRACKING,
            source="Siems et al. 2025, DeltaProduct (S3 word problem, labels at every position)",
        ),
        TaskSpec(
            "s5", state_tracking.S5Config, state_tracking.generate_word_problem, base=({},), full=_STATE_FULL,
            head="lm", group=STATE_TRACKING,
            source="Merrill et al. 2024, \"The Illusion of State in State-Space Models\" (S5 word problem); "
                   "Siems et al. 2025, DeltaProduct",
        ),
    ]
}

#: task groups by name: ``recall`` runs by default, ``state-tracking`` when asked for
GROUPS: dict[str, tuple[str, ...]] = {
    group: tuple(name for name, t in TASKS.items() if t.group == group) for group in (RECALL, STATE_TRACKING)
}
#: the tasks the suite runs when none are named: MQAR and MAD's six
DEFAULT_TASKS = GROUPS[RECALL]


def expand_tasks(names: tuple[str, ...]) -> tuple[str, ...]:
    """Task names with each group name replaced by its tasks, in order (unknown names are left for
    :func:`get_task` to refuse)."""
    out: list[str] = []
    for name in names:
        out += list(GROUPS[name]) if name in GROUPS else [name]
    return tuple(out)


def get_task(name: str) -> TaskSpec:
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownNameError("synthetic task", name, TASKS) from None


def parse_settings(spec: str) -> dict[str, list[dict[str, Any]]]:
    """``"mqar:seq_len=64,num_kv_pairs=4; selective-copy:num_tokens_to_copy=32"`` -> per task, the overrides of
    each setting (a task named without overrides, ``"compression:"``, is its default config)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for chunk in (c.strip() for c in spec.split(";")):
        if not chunk:
            continue
        name, sep, rest = chunk.partition(":")
        if not sep:
            raise ConfigError(f"synthetic: setting '{chunk}' must look like task:field=value,field=value.")
        task = get_task(name.strip())
        types = {f.name: f.type for f in dataclasses.fields(task.config_cls)}
        overrides: dict[str, Any] = {}
        for item in (i.strip() for i in rest.split(",")):
            if not item:
                continue
            key, eq, raw = item.partition("=")
            key = key.strip()
            if not eq or key not in types:
                raise ConfigError(f"synthetic: '{item}' in setting '{chunk}' is not field=value with a field of "
                                  f"{task.name} ({', '.join(types)}).")
            overrides[key] = _parse_value(raw.strip(), types[key], key)
        out.setdefault(task.name, []).append(overrides)
    return out


def _parse_value(raw: str, annotation: Any, key: str) -> Any:
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    try:
        if kind == "float":
            return float(raw)
        if kind == "bool":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        return int(raw)
    except ValueError:
        raise ConfigError(f"synthetic: {key}={raw} is not a {kind}.") from None


def unigram_mode(targets: np.ndarray) -> int:
    """The most frequent target token (ties: the smallest id), for the guess-the-mode baseline."""
    values, counts = np.unique(targets[targets >= 0], return_counts=True)
    return int(values[np.argmax(counts)])
