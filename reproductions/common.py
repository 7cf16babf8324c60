"""What several targets share: the paper mixers, and finding a metric by its name's pattern."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from harness.reproduction import Measured, RunIndex, Subject

#: the ProtoT paper's four mixers (docs/PAPERS.md)
PAPER_MIXERS = ("attention", "mamba", "deltanet", "protot")
#: those whose decode state does not grow with the context
FIXED_STATE = ("mamba", "deltanet", "protot")


def distinct(subjects: Iterable[Subject]) -> list[Subject]:
    """``subjects`` without repeats, in order (a negative may put one subject in two roles; configs are dicts, so
    subjects do not hash)."""
    out: list[Subject] = []
    for s in subjects:
        if s not in out:
            out.append(s)
    return out


def measured_like(runs: RunIndex, suite: str, mixer: "str | Subject", pattern: str,
                  suite_config: Mapping[str, Any] | None = None) -> Measured | None:
    """The first metric of ``mixer``'s run of ``suite`` whose name matches ``pattern`` (fnmatch); with
    ``suite_config``, of a run whose suite config holds those items (one width of a grid that varies it)."""
    for record in runs.records(suite, mixer):
        if suite_config and any(record.manifest.suite_config.get(k) != v for k, v in suite_config.items()):
            continue
        for m in record.metrics:
            if fnmatch.fnmatchcase(m.name, pattern):
                return Measured.of(m.value, m.interval)
    return None
