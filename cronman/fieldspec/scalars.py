"""Scalar fields: strings, numbers, booleans, choices, constants, times."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cronman.errors import ValidationError
from cronman.fieldspec.base import JOB_TIME_PATTERN, TIME_MAX, TIME_MIN, Field, Schema, type_name
from cronman.timeutil import parse_rfc3339


class Str(Field):
    """A string: non-empty when ``min_len`` is 1, at most ``max_len``, matching ``pattern``."""

    def __init__(self, *, min_len: int = 0, max_len: int | None = None,
                 pattern: str | None = None,
                 type_message: str = "must be a string, not {type}",
                 empty_message: str = "must not be empty",
                 long_message: str = "must be at most {max} characters",
                 pattern_message: str = "invalid value {value!r}", **kw: Any) -> None:
        super().__init__(**kw)
        self.min_len = min_len
        self.max_len = max_len
        self.pattern = pattern
        self._match = re.compile(pattern).match if pattern is not None else None
        self.type_message = type_message
        self.empty_message = empty_message
        self.long_message = long_message
        self.pattern_message = pattern_message

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        if len(value) < self.min_len:
            raise ValidationError(self.empty_message)
        if self.max_len is not None and len(value) > self.max_len:
            raise ValidationError(self.long_message.format(max=self.max_len))
        if self._match is not None and not self._match(value):
            raise ValidationError(self.pattern_message.format(value=value))
        if self.rules:
            self._apply_rules(value)
        return value

    def body(self) -> Schema:
        out: Schema = {"type": "string"}
        if self.min_len:
            out["minLength"] = self.min_len
        if self.max_len is not None:
            out["maxLength"] = self.max_len
        if self.pattern is not None:
            out["pattern"] = self.pattern
        return out


class Int(Field):
    """An integer in [lo, hi]; an integral float (3.0) is taken as the integer."""

    def __init__(self, *, lo: int, hi: int,
                 type_message: str = "must be an integer, not {type}",
                 range_message: str = "must be between {lo} and {hi}", **kw: Any) -> None:
        super().__init__(**kw)
        self.lo, self.hi = lo, hi
        self.type_message = type_message
        self.range_message = range_message

    def check(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            # JSON does not tell integers from floats.
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise ValidationError(self.type_message.format(type=type_name(value)))
        if not self.lo <= value <= self.hi:
            raise ValidationError(self.range_message.format(lo=self.lo, hi=self.hi))
        return value

    def body(self) -> Schema:
        return {"type": "integer", "minimum": self.lo, "maximum": self.hi}


class Num(Field):
    """A finite number in [lo, hi] (``lo_open``: greater than lo)."""

    def __init__(self, *, lo: float, hi: float, lo_open: bool = False,
                 type_message: str = "must be a number, not {type}",
                 finite_message: str = "must be a finite number",
                 range_message: str = "must be between {lo:g} and {hi:g}", **kw: Any) -> None:
        super().__init__(**kw)
        self.lo, self.hi, self.lo_open = lo, hi, lo_open
        self.type_message = type_message
        self.finite_message = finite_message
        self.range_message = range_message

    def check(self, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(self.finite_message.format(lo=self.lo, hi=self.hi))
        if not (self.lo < value if self.lo_open else self.lo <= value) or value > self.hi:
            raise ValidationError(self.range_message.format(lo=self.lo, hi=self.hi))
        return value

    def body(self) -> Schema:
        low = "exclusiveMinimum" if self.lo_open else "minimum"
        return {"type": "number", low: self.lo, "maximum": self.hi}


class Bool(Field):
    """true or false."""

    def __init__(self, *, type_message: str = "must be true or false, not {type}",
                 **kw: Any) -> None:
        super().__init__(**kw)
        self.type_message = type_message

    def check(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        return value

    def body(self) -> Schema:
        return {"type": "boolean"}


class Choice(Field):
    """One of ``choices`` (``upper``: any case, normalised to upper case).

    ``refused``: choices this placement refuses, each with its own message
    (left out of the schema's enum).
    """

    def __init__(self, choices: Sequence[str], *,
                 message: str = "must be one of {choices}", upper: bool = False,
                 refused: Mapping[str, str] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.choices = tuple(str(c) for c in choices)
        self.message = message.format(choices=", ".join(self.choices))
        self.upper = upper
        self.refused = dict(refused or {})

    def check(self, value: Any) -> Any:
        if isinstance(value, str):
            if self.upper:
                value = value.upper()
            if value in self.choices:
                if value in self.refused:
                    raise ValidationError(self.refused[value])
                return str.__str__(value)  # the plain string, never an enum member
        raise ValidationError(self.message)

    def body(self) -> Schema:
        return {"enum": [c for c in self.choices if c not in self.refused]}


class Const(Field):
    """Exactly ``value`` (a ``OneOf`` discriminator: the dispatch has checked it)."""

    def __init__(self, value: str, **kw: Any) -> None:
        super().__init__(required=True, **kw)
        self.value = value

    def check(self, value: Any) -> Any:
        if value != self.value:
            raise ValidationError(f"must be {self.value!r}")
        return self.value

    def body(self) -> Schema:
        return {"const": self.value}


class Time(Field):
    """An RFC 3339 time with offset, as a UTC datetime; ``bounded``: in [1970, 9000)."""

    def __init__(self, *, bounded: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        self.bounded = bounded

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise ValidationError(f"must be an RFC 3339 string, not {type_name(value)}")
        try:
            t = parse_rfc3339(value)
        except (ValueError, OverflowError) as exc:
            raise ValidationError(f"invalid RFC 3339 time {value!r}: {exc}") from None
        if self.bounded and not TIME_MIN <= t < TIME_MAX:
            raise ValidationError(f"must be between {TIME_MIN.year} and {TIME_MAX.year - 1}")
        return t

    def body(self) -> Schema:
        out: Schema = {"type": "string", "format": "date-time"}
        if self.bounded:
            out["pattern"] = JOB_TIME_PATTERN
        return out
