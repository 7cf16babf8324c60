"""One typed value parser for every config: ``--suite-config``, ``--mixer-config``, plan files (docs/values.md).

A config is a dataclass; its fields' type hints say what a value must be, and optional field metadata (written
with :func:`option`) adds a one-line doc, a range and a set of choices::

    @dataclass(frozen=True)
    class MyConfig:
        max_windows: int = option(0, "windows per split (0 = all)", min=0)
        confidence: float = option(0.95, "CI level", min=0.5, lt=1)
        pooling: str = option("last", "how a sequence is pooled", choices=("last", "mean"))

Values arrive in two forms and are held to the same rules:

* **strings** from the command line (``max_windows=16``) are converted by the field's type: ``"2.5"``, ``"true"``
  and ``"nan"`` are not integers; ``"1,2"`` is a tuple of two for a ``tuple[int, ...]`` field;
* **typed values** from YAML/JSON plans are checked: ``2.5`` and ``true`` are not integers, ``.nan`` is not a
  number a float field accepts unless it says ``allow_nan``.

Ints never take booleans or floats; floats take ints (stored as floats, so ``lr: 1`` and ``lr: 1.0`` are one
config) but not NaN or infinity unless the field allows them. Every error is a :class:`ConfigError` of one
sentence naming the field, the value, the expected type and the valid range.

Order of checks in :func:`build_config`: names and types first; then the config's own ``__post_init__`` (whose
messages, which often explain the field, win); then the declared ranges and choices of the built object.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
import io
import math
import numbers
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from harness.errors import ConfigError, short_repr

_LIMIT_KEYS = ("min", "max", "gt", "lt")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_INT = re.compile(r"[+-]?\d(_?\d)*")


def option(default: Any = dataclasses.MISSING, doc: str = "", *, min: float | None = None,  # noqa: A002
           max: float | None = None, gt: float | None = None, lt: float | None = None,  # noqa: A002
           choices: tuple | None = None, allow_nan: bool = False, allow_inf: bool = False) -> Any:
    """A dataclass field with a one-line ``doc``, a range (``min``/``max`` inclusive, ``gt``/``lt`` exclusive)
    and ``choices`` (for a tuple field: of each item); a float field may allow NaN or infinity."""
    meta: dict[str, Any] = {"doc": doc} if doc else {}
    for key, value in (("min", min), ("max", max), ("gt", gt), ("lt", lt), ("choices", choices)):
        if value is not None:
            meta[key] = tuple(value) if key == "choices" else value
    if allow_nan:
        meta["allow_nan"] = True
    if allow_inf:
        meta["allow_inf"] = True
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class FieldInfo:
    """What the parser and ``mixbench suites`` know about one config field."""

    name: str
    type: Any  # the resolved type hint (Any when it cannot be resolved)
    default: Any  # dataclasses.MISSING when required
    doc: str = ""
    min: float | None = None
    max: float | None = None
    gt: float | None = None
    lt: float | None = None
    choices: tuple | None = None
    allow_nan: bool = False
    allow_inf: bool = False

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    def type_text(self) -> str:
        """The type as ``mixbench suites`` prints it: int, float, bool, str, list of int, one of a|b, ..."""
        return _type_name(self.type)

    def range_text(self) -> str:
        """``>= 1``, ``in [0.5, 1)``, ``one of last, mean`` or ``""``."""
        choices = self.choices or _literal_choices(self.type)
        parts = [p for p in (_bounds_text(self), choices and f"one of {', '.join(map(cli_text, choices))}") if p]
        sequence = typing.get_origin(self.type) in (tuple, list) or self.type in (tuple, list)
        return ("each " if sequence and parts else "") + " and ".join(parts)

    def default_text(self) -> str:
        """The default as it would be typed on the command line."""
        return "(required)" if self.required else cli_text(self.default)


def cli_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list)):
        return ",".join(cli_text(v) for v in value) if value else '""'
    if value is None:
        return "none"
    if value == "":
        return '""'
    return str(value)


# ------------------------------------------------------------------------------------------------ fields


@lru_cache(maxsize=None)
def config_fields(cls: type) -> tuple[FieldInfo, ...]:
    """The fields of a config dataclass with resolved types, docs (metadata, else the field's trailing comment)
    and declared limits."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # an annotation naming something not importable here: treat those fields as untyped
        hints = {}
    comments = _field_comments(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        meta = dict(f.metadata or {})
        tp = hints.get(f.name, Any)
        if typing.get_origin(tp) is typing.Annotated:  # Annotated[int, option-like dict]: use its metadata too
            for extra in typing.get_args(tp)[1:]:
                if isinstance(extra, Mapping):
                    meta = {**extra, **meta}
            tp = typing.get_args(tp)[0]
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(FieldInfo(
            f.name, tp, default, str(meta.get("doc") or comments.get(f.name, "")),
            *(meta.get(k) for k in _LIMIT_KEYS),
            tuple(meta["choices"]) if meta.get("choices") is not None else None,
            bool(meta.get("allow_nan", False)), bool(meta.get("allow_inf", False)),
        ))
    return tuple(out)


def _field_comments(cls: type) -> dict[str, str]:
    """A field's doc from the class's source: its trailing comment (``name: int = 0  # the doc``) or the ``#:``
    comment lines right above it (the Sphinx convention)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: str | None = None  # the field whose statement is open on this line
    above: list[str] = []  # `#:` lines waiting for the field they document
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NAME and tok.start[1] == 4 and pending is None:
                pending = tok.string
                if above:
                    out[pending] = " ".join(above)
                    above = []
            elif tok.type == tokenize.COMMENT and pending is not None:
                out.setdefault(pending, tok.string.lstrip("#").strip())
            elif tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
                above.append(tok.string[2:].strip())
            elif tok.type == tokenize.NEWLINE:
                pending = None
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return out
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in out.items() if k in names}


# ---------------------------------------------------------------------------------------------- building


def build_config(cls: type, values: Mapping[str, Any] | None, owner: str) -> Any:
    """``cls(**values)`` with every value converted and checked (see the module docstring). The declared limits
    are checked on the given values before the class is built, so a bad value is named with its field even where
    ``__post_init__`` has a broader rule of its own, and again on the built object (``__post_init__`` may
    normalise)."""
    coerced = coerce_values(cls, values, owner)
    infos = {f.name: f for f in config_fields(cls)}
    for name, value in coerced.items():
        _check_field(infos[name], value, owner)
    obj = cls(**coerced)
    check_limits(obj, owner)
    return obj


def coerce_values(cls: type, values: Mapping[str, Any] | None, owner: str) -> dict[str, Any]:
    """``values`` with each one converted to its field's type; unknown names are an error naming the valid ones."""
    values = dict(values or {})
    infos = {f.name: f for f in config_fields(cls)}
    unknown = sorted(set(values) - set(infos))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(infos), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        valid = ", ".join(sorted(infos)) or "(none: it takes no options)"
        raise ConfigError(f"{owner}: unknown config field(s) {', '.join(unknown)}{hint}; valid fields: {valid}.")
    return {name: coerce(infos[name], value, owner) for name, value in values.items()}


def check_limits(obj: Any, owner: str) -> None:
    """The declared ranges and choices of a built config's fields (after its own ``__post_init__``)."""
    for info in config_fields(type(obj)):
        _check_field(info, getattr(obj, info.name), owner)


def _check_field(info: FieldInfo, value: Any, owner: str) -> None:
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if not _within(info, item):
            shown = value if len(items) == 1 and not isinstance(value, (tuple, list)) else item
            detail = "" if shown is value else f" (in {cli_text(value)})"
            raise ConfigError(f"{owner}: {info.name} must be {_expected(info)}, got {shown!r}{detail}.")


def _within(info: FieldInfo, item: Any) -> bool:
    if info.choices is not None and item not in info.choices:
        return False
    if isinstance(item, bool) or not isinstance(item, numbers.Real) or math.isnan(item):
        return True  # types were checked before construction; NaN was admitted by allow_nan
    return not (
        (info.min is not None and item < info.min) or (info.max is not None and item > info.max)
        or (info.gt is not None and item <= info.gt) or (info.lt is not None and item >= info.lt)
    )


class _Mismatch(Exception):
    """A value that does not fit a type (turned into one ConfigError sentence by :func:`coerce`)."""


def coerce(info: FieldInfo, value: Any, owner: str) -> Any:
    """One value converted to (a string) or checked against (a typed value) the field's type."""
    try:
        return _convert(info.type, value, info)
    except _Mismatch as exc:
        why = f" ({exc})" if str(exc) else ""
        raise ConfigError(f"{owner}: {info.name} must be {_expected(info)}, got {short_repr(value)}{why}.") from None


def _convert(tp: Any, value: Any, info: FieldInfo) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object or isinstance(tp, (str, typing.TypeVar)):
        return _legacy(value) if isinstance(value, str) else value
    if origin is typing.Union or origin is types.UnionType:
        alternatives = [a for a in args if a is not type(None)]
        if len(alternatives) < len(args) and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
            return None
        for alt in alternatives:
            try:
                return _convert(alt, value, info)
            except _Mismatch:
                continue
        raise _Mismatch()
    if origin is typing.Literal:
        for choice in args:
            if value == choice or (isinstance(value, str) and not isinstance(choice, str) and value == cli_text(choice)):
                return choice
        raise _Mismatch()
    if origin in (tuple, list) or tp in (tuple, list):
        return _sequence(origin or tp, args, value, info)
    if origin in (dict, Mapping) or tp is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise _Mismatch("a mapping can only be given in a plan file")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if value is member or value == member.value or value == member.name or value == str(member.value):
                return member
        raise _Mismatch()
    if tp is bool:
        return _bool(value)
    if tp is int:
        return _int(value)
    if tp is float:
        return _float(value, info)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _Mismatch()
    return _legacy(value) if isinstance(value, str) else value  # a type we do not know: the config checks it


def _sequence(kind: type, args: tuple, value: Any, info: FieldInfo) -> tuple | list:
    if isinstance(value, str):
        items: list[Any] = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if len(args) == 2 and args[1] is Ellipsis or kind is list:
        item_types = [args[0] if args else Any] * len(items)
    elif args:  # fixed length: tuple[float, float]
        if len(items) != len(args):
            raise _Mismatch(f"{len(items)} item(s) instead of {len(args)}")
        item_types = list(args)
    else:
        item_types = [Any] * len(items)
    out = []
    for item_type, item in zip(item_types, items):
        try:
            out.append(_convert(item_type, item, info))
        except _Mismatch:
            raise _Mismatch(f"{item!r} is not {_type_phrase(item_type, info)}") from None
    return list(out) if kind is list else tuple(out)


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise _Mismatch()


#: every integer a config holds is a count, size or seed; past 64 bits it is a typo, and Python refuses to even
#: convert strings of more than 4,300 digits
_MAX_INT = 2**63 - 1


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Mismatch("a boolean")
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        digits = value.strip().lstrip("+-").replace("_", "")
        if len(digits) > 19:
            raise _Mismatch(f"a number of {len(digits):,} digits, outside the 64-bit range")
        value = int(value.strip())
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > _MAX_INT:
            raise _Mismatch("outside the 64-bit range")
        return int(value)
    raise _Mismatch()


def _float(value: Any, info: FieldInfo) -> float:
    if isinstance(value, bool):
        raise _Mismatch("a boolean")
    if isinstance(value, numbers.Real):
        number = float(value)
    elif isinstance(value, str):  # "0" and "1" are numbers here; "true"/"yes" are not (float() refuses them)
        try:
            number = float(value.strip())
        except ValueError:
            raise _Mismatch() from None
    else:
        raise _Mismatch()
    if math.isnan(number) and not info.allow_nan:
        raise _Mismatch("NaN is not allowed here")
    if math.isinf(number) and not info.allow_inf:
        raise _Mismatch("infinity is not allowed here")
    return number


def _legacy(raw: str) -> Any:
    """An untyped field's string: a bool, int or float when it reads as one, else the string."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


# ---------------------------------------------------------------------------------------------- wording


def _expected(info: FieldInfo) -> str:
    """``an integer >= 0``, ``a number in [0.5, 1)``, ``one of last, mean``, ``a comma-separated list of ...``."""
    bounds = _bounds_text(info)
    if info.choices:
        listed = ", ".join(map(cli_text, info.choices))
        sequence = typing.get_origin(info.type) in (tuple, list) or info.type in (tuple, list)
        return f"a comma-separated list of names among {listed}" if sequence else f"one of {listed}"
    phrase = _type_phrase(info.type, info)
    return f"{phrase} {bounds}" if bounds else phrase


def _bounds_text(info: FieldInfo) -> str:
    """``>= 1``, ``> 0``, ``<= 8``, ``in [0.5, 1)`` from the declared limits, or ``""``."""
    lo = f"[{_num(info.min)}" if info.min is not None else f"({_num(info.gt)}" if info.gt is not None else ""
    hi = f"{_num(info.max)}]" if info.max is not None else f"{_num(info.lt)})" if info.lt is not None else ""
    if lo and hi:
        return f"in {lo}, {hi}"
    if lo:
        return f"{'>=' if info.min is not None else '>'} {lo[1:]}"
    if hi:
        return f"{'<=' if info.max is not None else '<'} {hi[:-1]}"
    return ""


def _literal_choices(tp: Any) -> tuple | None:
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


def _type_phrase(tp: Any, info: FieldInfo | None = None) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        alternatives = [a for a in args if a is not type(None)]
        phrase = " or ".join(_type_phrase(a, info) for a in alternatives)
        return phrase + (" or none" if len(alternatives) < len(args) else "")
    if origin is typing.Literal:
        return f"one of {', '.join(cli_text(a) for a in args)}"
    if origin in (tuple, list) or tp in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis or (origin is list and args):
            return f"a comma-separated list of {_plural(args[0], info)}"
        if args:
            return f"{len(args)} comma-separated {_plural(args[0], info)}"
        return "a comma-separated list"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return f"one of {', '.join(str(m.value) for m in tp)}"
    if tp is float and info is not None:
        special = [w for w, ok in (("NaN", info.allow_nan), ("infinity", info.allow_inf)) if ok]
        return "a number" + (f" (or {' or '.join(special)})" if special else "")
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, "a value")


def _plural(tp: Any, info: FieldInfo | None) -> str:
    return {int: "integers", float: "numbers", str: "names", bool: "true/false values"}.get(tp, "values")


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join("none" if a is type(None) else _type_name(a) for a in args)
    if origin is typing.Literal:
        return "|".join(cli_text(a) for a in args)
    if origin in (tuple, list):
        if len(args) == 2 and args[1] is Ellipsis or (origin is list and args):
            return f"list of {_type_name(args[0])}"
        return f"{len(args)} x {_type_name(args[0])}" if args else "list"
    if isinstance(tp, type):
        return tp.__name__
    return "any" if tp is Any else str(tp)


def _num(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


# --------------------------------------------------------------------------------------------- listing


def describe_fields(cls: type, indent: str = "  ") -> list[str]:
    """One line per field, ``name  type  default  doc [range]``, aligned: what ``mixbench suites`` prints."""
    infos = config_fields(cls)
    if not infos:
        return [f"{indent}(no config fields)"]
    rows = []
    for f in infos:
        limits = f.range_text()
        doc = f.doc + (f" [{limits}]" if limits else "")
        rows.append((f.name, f.type_text(), f.default_text(), doc))
    widths = [min(max(len(r[i]) for r in rows), 24) for i in range(3)]  # a long default overflows its own row only
    return [
        f"{indent}{name:<{widths[0]}}  {kind:<{widths[1]}}  {default:<{widths[2]}}  {doc}".rstrip()
        for name, kind, default, doc in rows
    ]
