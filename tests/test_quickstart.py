"""The embedded default names registered mixers and suites with configs each suite accepts.

A typo in a quickstart override would otherwise surface only after minutes of training in `make quickstart`.
"""

from harness.config import as_tuple
from harness.quickstart import QUICKSTART_MIXERS, QUICKSTART_SUITES, quickstart_suite_configs
from harness.registry import MIXERS, SUITES


def test_quickstart_names_the_papers_four_mixers_and_every_built_in_suite():
    assert set(QUICKSTART_MIXERS) == {"protot", "attention", "mamba", "deltanet"}
    assert all(MIXERS.get(name) for name in QUICKSTART_MIXERS)
    built_in = {name for name in SUITES.names() if SUITES.get(name).cls.__module__.startswith("suites.")}
    assert set(QUICKSTART_SUITES) == built_in


def test_every_quickstart_override_builds_its_suite_config():
    configs = quickstart_suite_configs()
    assert set(configs) <= set(QUICKSTART_SUITES)
    for suite, overrides in configs.items():
        cfg = SUITES.get(suite).make_config(overrides)
        for key, value in overrides.items():  # the override arrived ("a,b" and lists become tuples)
            if isinstance(value, list) or (isinstance(value, str) and "," in value):
                value = as_tuple(value, type(getattr(cfg, key)[0]))
            assert getattr(cfg, key) == value, (suite, key)
