"""The typed value parser (harness/values.py): CLI strings and plan values held to each field's type and range."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Literal

import pytest

from harness.errors import ConfigError
from harness.store.identity import train_id
from harness.values import build_config, coerce_values, config_fields, describe_fields, option


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Sample:
    """A plugin's config with one field of every kind the parser knows."""

    count: int = option(1, "a count", min=0)
    rate: float = option(0.5, "a rate", gt=0, lt=1)
    ratio: float = option(1.0, "may be NaN", allow_nan=True)
    flag: bool = False  # a switch
    name: str = "x"
    sizes: tuple[int, ...] = option((1,), "sizes", min=1)
    betas: tuple[float, float] = (0.9, 0.95)
    mode: Literal["fast", "exact"] = "fast"
    color: Color = Color.RED
    limit: int | None = None
    kind: str = option("a", "one of two", choices=("a", "b"))

    #: documented above the field
    above: int = 0

    def __post_init__(self) -> None:
        if self.count == 13:
            raise ConfigError("sample: count may not be 13 (its own check).")


OK = [  # (field, value as given, value the config holds)
    ("count", "3", 3), ("count", 3, 3), ("count", "+7", 7), ("count", "1_000", 1000),
    ("rate", "0.25", 0.25), ("rate", 0.25, 0.25), ("rate", "1e-3", 1e-3),
    ("ratio", 2, 2.0), ("flag", "true", True), ("flag", "No", False), ("flag", True, True), ("flag", "1", True),
    ("name", "hello world", "hello world"), ("sizes", "4,8,16", (4, 8, 16)), ("sizes", [4, 8], (4, 8)),
    ("sizes", 5, (5,)), ("sizes", "", ()), ("betas", "0.8,0.9", (0.8, 0.9)), ("betas", [0.8, 1], (0.8, 1.0)),
    ("mode", "exact", "exact"), ("color", "blue", Color.BLUE), ("color", "BLUE", Color.BLUE),
    ("limit", "none", None), ("limit", None, None), ("limit", "5", 5), ("kind", "b", "b"),
]

BAD = [  # (field, value, the whole message)
    ("count", "abc", "sample: count must be an integer >= 0, got 'abc'."),
    ("count", "2.5", "sample: count must be an integer >= 0, got '2.5'."),
    ("count", 2.5, "sample: count must be an integer >= 0, got 2.5."),
    ("count", "true", "sample: count must be an integer >= 0, got 'true'."),
    ("count", True, "sample: count must be an integer >= 0, got True (a boolean)."),
    ("count", "nan", "sample: count must be an integer >= 0, got 'nan'."),
    ("count", math.inf, "sample: count must be an integer >= 0, got inf."),
    ("count", -1, "sample: count must be an integer >= 0, got -1."),
    ("rate", "nan", "sample: rate must be a number in (0, 1), got 'nan' (NaN is not allowed here)."),
    ("rate", math.nan, "sample: rate must be a number in (0, 1), got nan (NaN is not allowed here)."),
    ("rate", "-inf", "sample: rate must be a number in (0, 1), got '-inf' (infinity is not allowed here)."),
    ("rate", "yes", "sample: rate must be a number in (0, 1), got 'yes'."),
    ("rate", 1, "sample: rate must be a number in (0, 1), got 1.0."),
    ("ratio", "inf", "sample: ratio must be a number (or NaN), got 'inf' (infinity is not allowed here)."),
    ("flag", "maybe", "sample: flag must be true or false, got 'maybe'."),
    ("flag", 1, "sample: flag must be true or false, got 1."),
    ("name", 3, "sample: name must be a string, got 3."),
    ("sizes", "4,x", "sample: sizes must be a comma-separated list of integers >= 1, got '4,x' ('x' is not an integer)."),
    ("sizes", [4, 2.5], "sample: sizes must be a comma-separated list of integers >= 1, got [4, 2.5] (2.5 is not an integer)."),
    ("sizes", "4,0", "sample: sizes must be a comma-separated list of integers >= 1, got 0 (in 4,0)."),
    ("betas", "0.9", "sample: betas must be 2 comma-separated numbers, got '0.9' (1 item(s) instead of 2)."),
    ("mode", "slow", "sample: mode must be one of fast, exact, got 'slow'."),
    ("color", "green", "sample: color must be one of red, blue, got 'green'."),
    ("limit", "lots", "sample: limit must be an integer or none, got 'lots'."),
    ("kind", "c", "sample: kind must be one of a, b, got 'c'."),
]


@pytest.mark.parametrize("name, given, held", OK)
def test_values_are_converted_by_their_field_type(name, given, held):
    value = getattr(build_config(Sample, {name: given}, "sample"), name)
    assert value == held and type(value) is type(held)


@pytest.mark.parametrize("name, given, message", BAD)
def test_bad_values_are_one_sentence_naming_field_value_type_and_range(name, given, message):
    with pytest.raises(ConfigError) as info:
        build_config(Sample, {name: given}, "sample")
    assert str(info.value) == message


def test_cli_strings_and_plan_values_build_the_same_config():
    cli = build_config(Sample, {"count": "3", "rate": "0.5", "sizes": "2,4", "betas": "0.8,0.9"}, "s")
    plan = build_config(Sample, {"count": 3, "rate": 0.5, "sizes": [2, 4], "betas": [0.8, 0.9]}, "s")
    assert cli == plan
    assert build_config(Sample, {"ratio": "nan"}, "s").ratio != build_config(Sample, {"ratio": "nan"}, "s").ratio


def test_unknown_names_suggest_the_closest_and_the_config_keeps_its_own_checks():
    with pytest.raises(ConfigError, match=r"unknown config field\(s\) rat \(did you mean rate\?\); valid fields: above, "):
        coerce_values(Sample, {"rat": 1}, "sample")
    with pytest.raises(ConfigError, match="count may not be 13 \\(its own check\\)"):
        build_config(Sample, {"count": "13"}, "sample")


def test_docs_come_from_metadata_trailing_comments_and_sphinx_comments():
    docs = {f.name: f.doc for f in config_fields(Sample)}
    assert docs["count"] == "a count" and docs["flag"] == "a switch" and docs["above"] == "documented above the field"
    assert docs["name"] == ""
    lines = describe_fields(Sample)
    assert lines[0].split() == ["count", "int", "1", "a", "count", "[>=", "0]"]
    assert "sizes  list of int" in next(line for line in lines if "sizes" in line)
    assert "[each >= 1]" in next(line for line in lines if "sizes" in line)
    assert "fast|exact" in next(line for line in lines if line.split()[0] == "mode")


def test_mixer_config_from_the_cli_and_from_a_plan_is_one_model():
    from harness.model.specs import make_run_spec, parse_assignments

    cli = make_run_spec("protot", "tiny", parse_assignments(["n_prototypes=16", "tau_init=2"]))
    plan = make_run_spec("protot", "tiny", {"n_prototypes": 16, "tau_init": 2.0})
    assert train_id(cli) == train_id(plan) and cli.model.mixer_config == {"n_prototypes": 16, "tau_init": 2.0}
    with pytest.raises(ConfigError, match="train: token_budget must be an integer, got 'lots'"):
        make_run_spec("protot", "tiny", train_overrides={"token_budget": "lots"})
