"""mixbench core: registry, configs, backbone, training, data, results store, leaderboard, CLI."""

from harness.store.provenance import choose_threading_policy

# OpenMP reads its wait policy once, when torch loads it: choose it before anything imports torch (a short spin,
# then sleep; a user's own setting wins; worker processes get theirs from harness.running.executors).
choose_threading_policy()

import importlib

#: the public names and the module each lives in: imported on first use (PEP 562), so that `import harness` (and
#: the CLI's --help, argument errors and listings) does not load torch, numpy and scipy
_PUBLIC = {
    "ConfigError": "harness.errors", "MixbenchError": "harness.errors", "UnknownNameError": "harness.errors",
    "Mixer": "harness.mixer", "Unit": "harness.mixer", "state_floats": "harness.mixer",
    "Recorder": "harness.recording", "record": "harness.recording",
    "MIXERS": "harness.registry", "SUITES": "harness.registry", "load_plugins": "harness.registry",
    "register_mixer": "harness.registry", "register_suite": "harness.registry",
    "Interval": "harness.stats",
    "ItemValues": "harness.suite", "Metric": "harness.suite", "Suite": "harness.suite",
    "SuiteCommand": "harness.suite", "SuiteContext": "harness.suite", "SuiteResult": "harness.suite",
}


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")

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
