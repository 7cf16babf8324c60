"""mixbench core: registry, configs, backbone, training, data, results store, leaderboard, CLI."""

from harness.provenance import choose_threading_policy

# OpenMP reads its wait policy once, when torch loads it: choose it before anything imports torch (a short spin,
# then sleep; a user's own setting wins; worker processes get theirs from harness.executors).
choose_threading_policy()

from harness.errors import ConfigError, MixbenchError, UnknownNameError
from harness.mixer import Mixer, Unit, state_floats
from harness.recording import Recorder, record
from harness.registry import MIXERS, SUITES, load_plugins, register_mixer, register_suite
from harness.stats import Interval
from harness.suite import ItemValues, Metric, Suite, SuiteCommand, SuiteContext, SuiteResult

__all__ = [
    "ConfigError",
    "Interval",
    "ItemValues",
    "MIXERS",
    "Metric",
    "Mixer",
    "MixbenchError",
    "Recorder",
    "SUITES",
    "Suite",
    "SuiteCommand",
    "SuiteContext",
    "SuiteResult",
    "Unit",
    "UnknownNameError",
    "load_plugins",
    "record",
    "register_mixer",
    "register_suite",
    "state_floats",
]

__version__ = "0.1.0"
