"""The rule framework of the trainer config: how one field is checked, read from JSON data and
written back to it, and the base of the block dataclasses that check every field at construction.

A block field is declared with :func:`rule_field` (its default and its :class:`Rule`); the rule's
``description`` completes the error line ``"<key>: expected <description>, got <value>"``.
Types are strict: ``true`` is not an integer, ``16.0`` is not an integer, but an integer is
accepted where a number is expected (and stored as a float).
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from trainer.contract.errors import ConfigError

__all__ = [
    "Block",
    "BoolRule",
    "DeviceRule",
    "EntriesRule",
    "FloatRule",
    "IntListRule",
    "IntRule",
    "OneOf",
    "OptionalRule",
    "REQUIRED",
    "Rule",
    "StepWindowRule",
    "StrRule",
    "block_from_dict",
    "block_to_dict",
    "expect_object",
    "is_int",
    "is_number",
    "parse_step_window",
    "rule_field",
    "rule_of",
    "show_value",
    "unknown_key",
]


def show_value(value: object) -> str:
    """The value as it appears in an error message (``repr``, shortened to one short line)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (``True`` and ``16.0`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """Whether ``value`` is a finite int or float (``True`` is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


class Rule(abc.ABC):
    """Check and conversion of one config field. ``description`` completes "expected ...".

    Attributes:
        description: what the field takes, as in its error line (``"an integer in [10, 24]"``).
        value_type: the type of the stored values other than null (``int``, ``float``, ``str``,
            ``bool``, ``tuple``).
        choices: the accepted values other than null when they are a fixed set, else None.
    """

    description: str
    value_type: type
    choices: tuple | None = None

    @abc.abstractmethod
    def accepts(self, value: object) -> bool:
        """Whether ``value`` is valid for the field."""

    def convert(self, value: Any) -> Any:
        """JSON value (already accepted) → the value stored in the dataclass."""
        return value

    def check(self, key: str, value: object) -> None:
        if not self.accepts(value):
            infinite = isinstance(value, float) and not math.isfinite(value)  # > 0, yet not a number a run can use
            raise ConfigError(f"{key}: expected {self.description}, got {show_value(value)}"
                              + (" (not a finite number)" if infinite else ""))

    def from_json(self, key: str, value: object) -> Any:
        self.check(key, value)
        return self.convert(value)

    def to_json(self, value: Any) -> Any:
        return value


class IntRule(Rule):
    def __init__(
        self,
        lo: int,
        hi: int | None = None,
        *,
        multiple_of: int = 1,
        power_of_two: bool = False,
    ) -> None:
        self.lo, self.hi, self.multiple_of, self.power_of_two = lo, hi, multiple_of, power_of_two
        self.value_type = int
        if power_of_two:
            self.description = f"a power of two in [{lo}, {hi}]"
        elif multiple_of == 2:
            self.description = f"an even integer in [{lo}, {hi}]"
        elif multiple_of > 1:
            self.description = f"a multiple of {multiple_of} in [{lo}, {hi}]"
        elif hi is not None:
            self.description = f"an integer in [{lo}, {hi}]"
        else:
            self.description = f"an integer >= {lo}"

    def accepts(self, value: object) -> bool:
        if not is_int(value):
            return False
        assert isinstance(value, int)
        if value < self.lo or (self.hi is not None and value > self.hi):
            return False
        if self.power_of_two and value & (value - 1):
            return False
        return value % self.multiple_of == 0


class FloatRule(Rule):
    """A finite number; integers are accepted and stored as floats."""

    def __init__(
        self,
        lo: float | None = None,
        hi: float | None = None,
        *,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open
        self.value_type = float
        if lo is not None and hi is not None:
            left, right = "(" if lo_open else "[", ")" if hi_open else "]"
            self.description = f"a number in {left}{lo}, {hi}{right}"
        elif lo is not None:
            self.description = f"a number {'>' if lo_open else '>='} {lo}"
        else:
            self.description = "a finite number"

    def accepts(self, value: object) -> bool:
        if not is_number(value):
            return False
        assert isinstance(value, (int, float))
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        if self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi):
            return False
        return True

    def convert(self, value: Any) -> float:
        return float(value)


class OneOf(Rule):
    """One of a fixed set of values, compared with their exact type (``True`` is not ``1``)."""

    def __init__(self, *choices: object) -> None:
        self.choices = choices
        self.value_type = type(choices[0])
        names = ", ".join(str(c) for c in choices)
        self.description = names if len(choices) == 1 else f"one of {names}"

    def accepts(self, value: object) -> bool:
        return any(type(value) is type(c) and value == c for c in self.choices)


class BoolRule(Rule):
    description = "true or false"
    value_type = bool
    choices = (False, True)

    def accepts(self, value: object) -> bool:
        return isinstance(value, bool)


class StrRule(Rule):
    def __init__(self, *, allow_empty: bool = False) -> None:
        self.allow_empty = allow_empty
        self.value_type = str
        self.description = "a string" if allow_empty else "a non-empty string"

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and (self.allow_empty or value != "")


class DeviceRule(Rule):
    description = "auto, cpu, cuda or cuda:N"
    value_type = str
    _PATTERN = re.compile(r"auto|cpu|cuda(:[0-9]+)?")

    def accepts(self, value: object) -> bool:
        return isinstance(value, str) and self._PATTERN.fullmatch(value) is not None


class OptionalRule(Rule):
    """``null`` or a value of the inner rule."""

    def __init__(self, inner: Rule) -> None:
        self.inner = inner
        self.description = f"null or {inner.description}"
        self.value_type = inner.value_type
        self.choices = inner.choices

    def accepts(self, value: object) -> bool:
        return value is None or self.inner.accepts(value)

    def convert(self, value: Any) -> Any:
        return None if value is None else self.inner.convert(value)


class EntriesRule(Rule):
    """A list of objects, each read into the dataclass ``cls``; stored as a tuple."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.description = "a list of objects"
        self.value_type = tuple

    def accepts(self, value: object) -> bool:
        return isinstance(value, tuple) and all(isinstance(e, self.cls) for e in value)

    def from_json(self, key: str, value: object) -> tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected {self.description}, got {show_value(value)}")
        return tuple(
            block_from_dict(self.cls, entry, f"{key}[{i}]") for i, entry in enumerate(value)
        )

    def to_json(self, value: Any) -> list:
        return [block_to_dict(entry) for entry in value]


class IntListRule(Rule):
    """A list of integers >= ``lo`` (and <= ``hi`` when given) without repeats; stored as a tuple."""

    def __init__(self, lo: int, hi: int | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.description = (f"a list of distinct integers >= {lo}" if hi is None else
                            f"a list of distinct integers in [{lo}, {hi:,}]")
        self.value_type = tuple

    def accepts(self, value: object) -> bool:
        return (
            isinstance(value, (list, tuple))
            and all(is_int(v) and v >= self.lo and (self.hi is None or v <= self.hi) for v in value)
            and len(set(value)) == len(value)
        )

    def convert(self, value: Any) -> tuple:
        return tuple(value)

    def to_json(self, value: Any) -> list:
        return list(value)


class StepWindowRule(Rule):
    """``"A:B"`` with integers 0 <= A < B: steps A..B-1."""

    description = 'a step window "A:B" with 0 <= A < B'
    value_type = str
    _PATTERN = re.compile(r"([0-9]+):([0-9]+)")

    def accepts(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        match = self._PATTERN.fullmatch(value)
        return match is not None and int(match.group(1)) < int(match.group(2))


def parse_step_window(window: str) -> tuple[int, int]:
    """``"A:B"`` → ``(A, B)`` (already validated by the config)."""
    start, stop = window.split(":")
    return int(start), int(stop)


REQUIRED = dataclasses.MISSING


def rule_field(default: Any, rule: Rule) -> Any:
    """A dataclass field with its rule; ``default=REQUIRED`` makes the key required."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def rule_of(cls: type, name: str) -> Rule:
    """The rule of field ``name`` of the block class ``cls`` (KeyError when there is none)."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls)}[name]


class Block:
    """Base of the block dataclasses: checks every field against its rule at construction.

    ``_PATH`` is the block's dotted path in error messages; ``_check_relations`` holds checks
    between fields.
    """

    _PATH: ClassVar[str]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            f.metadata["rule"].check(f"{self._PATH}.{f.name}", getattr(self, f.name))
        self._check_relations()

    def _check_relations(self) -> None:
        pass


#: An unknown key's error lists every candidate up to this many; beyond, the closest few.
LISTED_KEYS_MAX = 12
MIN_LIKENESS = 0.5  # a key less like the unknown one than this is no suggestion


def unknown_key(path: str, key: object, candidates: list[str]) -> ConfigError:
    """The error for a key that is not in ``candidates``: difflib's closest suggestion; without
    one, every candidate of a short list, else the three closest (difflib's ratio to the dotted
    key or its last part, case ignored; none below :data:`MIN_LIKENESS`) and how many there are."""
    dotted = f"{path}.{key}" if path else str(key)
    close = difflib.get_close_matches(str(key), candidates, n=1)
    if close:
        return ConfigError(f"unknown key {dotted!r} (did you mean {close[0]!r}?)")
    if len(candidates) <= LISTED_KEYS_MAX:
        return ConfigError(f"unknown key {dotted!r} (expected one of {', '.join(candidates)})")
    word = str(key).lower()

    def likeness(candidate: str) -> float:  # the whole dotted key or its last part, whichever is closer
        return max(difflib.SequenceMatcher(None, word, part).ratio()
                   for part in (candidate.lower(), candidate.lower().rsplit(".", 1)[-1]))

    nearest = [c for c in sorted(candidates, key=lambda c: -likeness(c))[:3] if likeness(c) >= MIN_LIKENESS]
    closest = f"closest: {', '.join(nearest)}; " if nearest else ""
    return ConfigError(f"unknown key {dotted!r} ({closest}one of {len(candidates)} keys, "
                       "listed in trainer/contract/config/blocks.py)")


def expect_object(path: str, value: object) -> Mapping:
    """``value`` if it is a JSON object (a mapping), else the ConfigError naming ``path``."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected an object, got {show_value(value)}")
    return value


def block_from_dict(cls: type, value: object, path: str) -> Any:
    """Read one block (or list entry) of class ``cls`` from JSON data found at ``path``."""
    data = expect_object(path, value)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, item in data.items():
        if key not in fields:
            raise unknown_key(path, key, list(fields))
        kwargs[key] = fields[key].metadata["rule"].from_json(f"{path}.{key}", item)
    for name, f in fields.items():
        if name not in kwargs and f.default is REQUIRED:
            raise ConfigError(f"{path}: missing key {name!r}")
    return cls(**kwargs)


def block_to_dict(block: Any) -> dict[str, Any]:
    """A block (or list entry) as plain JSON data, every field present."""
    fields = dataclasses.fields(block)
    return {f.name: f.metadata["rule"].to_json(getattr(block, f.name)) for f in fields}

