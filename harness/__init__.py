"""mixbench core: registry, configs, backbone, training, data, results store, leaderboard, CLI."""

import os

# Set before torch is imported: with OpenMP's default busy-waiting, two threads on a 2-core machine that also
# runs anything else (a second process, CI's other jobs) make each step up to 10-100x slower; passive waiting
# costs nothing measurable when the machine is quiet. A user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
