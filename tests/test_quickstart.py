"""The embedded default is what the mixers and suites declare, with configs each suite accepts.

A typo in a quickstart config would otherwise surface only after minutes of training in `make quickstart`.
"""

from harness.config import as_tuple
from harness.running.quickstart import quickstart_mixers, quickstart_suites
from harness.registry import MIXERS, SUITES


def test_quickstart_is_the_papers_four_mixers_and_every_built_in_suite():
    assert set(quickstart_mixers()) == {"protot", "attention", "mamba", "deltanet"}
    built_in = {name for name in SUITES.names() if SUITES.get(name).cls.__module__.startswith("suites.")}
    assert set(quickstart_suites()) == built_in
    assert all(MIXERS.get(name).cls.quickstart for name in quickstart_mixers())


def test_every_quickstart_config_builds_its_suite_config():
    for suite, overrides in quickstart_suites().items():
        cfg = SUITES.get(suite).make_config(overrides)
        for key, value in overrides.items():  # the override arrived ("a,b" and lists become tuples)
            if isinstance(getattr(cfg, key), tuple) and not isinstance(value, tuple):
                value = as_tuple(value, type(getattr(cfg, key)[0]))
            assert getattr(cfg, key) == value, (suite, key)
