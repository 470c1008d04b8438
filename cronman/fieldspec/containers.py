"""Container fields: maps, lists, objects, oneOf by discriminator, and custom code."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cronman.errors import ValidationError
from cronman.fieldspec.base import MISSING, Field, Schema, type_name
from cronman.fieldspec.scalars import Const, Str


class MapOf(Field):
    """An object of ``key`` names to ``value``s, at most ``max_items``.

    ``unique_ci``: the message for a name equal, but for case, to an earlier one.
    Errors name the entry (``labels.team``).
    """

    def __init__(self, key: Str, value: Field, *, max_items: int | None = None,
                 type_message: str = "must be an object, not {type}",
                 count_message: str = "at most {max} entries",
                 unique_ci: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.key, self.value = key, value
        self.max_items = max_items
        self.type_message = type_message
        self.count_message = count_message
        self.unique_ci = unique_ci

    def check(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        if self.max_items is not None and len(value) > self.max_items:
            raise ValidationError(self.count_message.format(max=self.max_items))
        seen: set[str] = set()
        out: dict[str, Any] = {}
        name = None
        try:
            for name, item in value.items():
                self.key.check(name)
                if self.unique_ci is not None:
                    low = name.lower()
                    if low in seen:
                        raise ValidationError(self.unique_ci)
                    seen.add(low)
                out[name] = self.value.check(item)
        except ValidationError as exc:
            raise ValidationError(exc.message, field=self.value.join(str(name), exc.field)) \
                from None
        return out

    def body(self) -> Schema:
        names = self.key.definition()
        names.pop("type", None)
        out: Schema = {"type": "object"}
        if self.max_items is not None:
            out["maxProperties"] = self.max_items
        out["propertyNames"] = names
        out["additionalProperties"] = self.value.schema()
        return out

    def children(self) -> Iterable[Field]:
        return (self.key, self.value)


class ListOf(Field):
    """An array of ``item``s, at most ``max_items``; errors name the index (``command[2]``)."""

    def __init__(self, item: Field, *, max_items: int | None = None,
                 type_message: str = "must be an array, not {type}",
                 count_message: str = "at most {max} items", **kw: Any) -> None:
        super().__init__(**kw)
        self.item = item
        self.max_items = max_items
        self.type_message = type_message
        self.count_message = count_message

    def check(self, value: Any) -> Any:
        if not isinstance(value, list):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        if self.max_items is not None and len(value) > self.max_items:
            raise ValidationError(self.count_message.format(max=self.max_items))
        check = self.item.check
        out: list[Any] = []
        try:
            for item in value:
                out.append(check(item))
        except ValidationError as exc:
            index = f"[{len(out)}]"
            raise ValidationError(exc.message, field=self.item.join(index, exc.field)) from None
        return out

    def join(self, key: str, sub: str | None) -> str:
        return key if sub is None else f"{key}{sub}"

    def body(self) -> Schema:
        out: Schema = {"type": "array", "items": self.item.schema()}
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        return out

    def children(self) -> Iterable[Field]:
        return (self.item,)


class Custom(Field):
    """A field checked by code that needs more than its value.

    ``fn(value, key, out, ctx)`` gets the raw value (None when missing or
    null), its key, the object built so far and the ``ctx`` given to
    ``Obj.check``; its errors name fields relative to the enclosing object
    (it is handed ``key`` to build them). ``schema`` is the fragment, or a
    function giving it (for a schema owned by a module loaded later).
    """

    handles_none = True

    def __init__(self, fn: Callable[[Any, str, dict[str, Any], Any], Any],
                 schema: Schema | Callable[[], Schema], **kw: Any) -> None:
        super().__init__(**kw)
        self.fn = fn
        self._schema = schema

    def check(self, value: Any) -> Any:
        raise TypeError("a Custom field is checked by its object (Obj.check)")

    def body(self) -> Schema:
        return dict(self._schema()) if callable(self._schema) else dict(self._schema)

    def schema(self) -> Schema:
        return self.body()


# Cross-field check run after a key: gets the object built so far; its errors
# name fields relative to the object.
After = Callable[[dict[str, Any]], None]


class Obj(Field):
    """An object of ``fields``; unknown keys are refused (``unknown_message``).

    ``special``: keys that are not fields but are skipped (None) or refused
    with their own message. ``required_first``: required keys are checked
    before any value (else each when its turn comes). ``after``: cross-field
    checks, each run once its key is done.
    """

    def __init__(self, fields: Mapping[str, Field], *,
                 type_message: str = "must be an object, not {type}",
                 unknown_message: str = "unknown key {key!r}",
                 special: Mapping[str, str | None] | None = None,
                 required_first: bool = False,
                 after: Mapping[str, After] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.fields = dict(fields)
        self.type_message = type_message
        self.unknown_message = unknown_message
        self.special = dict(special or {})
        self.required_first = required_first
        self.after = dict(after or {})
        for key in self.after:
            if key not in self.fields:
                raise KeyError(key)
        self.required_keys = tuple(k for k, f in self.fields.items() if f.required)
        # Per key, what the loop of ``check`` needs, looked up once.
        self._plan = tuple(
            (k, f, f.check, self.after.get(k), f.handles_none, f.required, f.nullable,
             isinstance(f.default, (dict, list)), None if f.default is MISSING else f.default)
            for k, f in self.fields.items())

    def check(self, value: Any, ctx: Any = None) -> Any:
        if not isinstance(value, Mapping):
            raise ValidationError(self.type_message.format(type=type_name(value)))
        fields = self.fields
        for key in value:
            if key not in fields:
                if key in self.special:
                    message = self.special[key]
                    if message is None:
                        continue
                    raise ValidationError(message.format(key=key), field=str(key))
                raise ValidationError(self.unknown_message.format(key=key), field=str(key))
        if self.required_first:
            for key in self.required_keys:
                if value.get(key) is None:
                    raise ValidationError(fields[key].required_message, field=key)
        out: dict[str, Any] = {}
        key = ""
        current: Field | None = None  # the field whose errors get ``key`` in front
        try:
            for key, f, check, after, custom, required, nullable, fresh, default in self._plan:
                raw = value.get(key)
                if custom:
                    current = None
                    out[key] = f.fn(raw, key, out, ctx)  # type: ignore[attr-defined]
                elif raw is not None:
                    current = f
                    out[key] = check(raw)
                elif required:
                    current = None
                    raise ValidationError(f.required_message, field=key)
                elif nullable or key not in value:
                    current = f
                    out[key] = check(default) if fresh else default
                else:  # an explicit null where null is not allowed: the type says why
                    current = f
                    out[key] = check(None)
                if after is not None:
                    current = None
                    after(out)
        except ValidationError as exc:
            if current is None:
                raise
            raise ValidationError(exc.message, field=current.join(key, exc.field)) from None
        return out

    def properties(self) -> Schema:
        """The schema of each key."""
        return {k: f.schema() for k, f in self.fields.items()}

    def body(self) -> Schema:
        out: Schema = {"type": "object", "properties": self.properties()}
        if self.required_keys:
            out["required"] = list(self.required_keys)
        out["additionalProperties"] = False
        return out

    def children(self) -> Iterable[Field]:
        return self.fields.values()


class OneOf(Field):
    """One of several ``Obj`` variants, told apart by their ``Const`` discriminator."""

    def __init__(self, variants: Sequence[Obj], *, discriminator: str = "kind",
                 type_message: str = "must be an object",
                 required_message: str = "is required (one of: {kinds})",
                 invalid_message: str = "must be one of: {kinds}", **kw: Any) -> None:
        super().__init__(**kw)
        self.variants = tuple(variants)
        self.discriminator = discriminator
        self.by_kind: dict[str, Obj] = {}
        for variant in self.variants:
            const = variant.fields[discriminator]
            if not isinstance(const, Const):
                raise TypeError(f"variant without a {discriminator} constant")
            self.by_kind[const.value] = variant
        kinds = ", ".join(self.by_kind)
        self.type_message = type_message
        self.required_message = required_message.format(kinds=kinds)
        self.invalid_message = invalid_message.format(kinds=kinds)
        self._templates = (type_message, required_message, invalid_message)
        self._restricted: dict[tuple[str, ...], OneOf] = {}

    def check(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise ValidationError(self.type_message)
        kind = value.get(self.discriminator)
        if kind is None:
            raise ValidationError(self.required_message, field=self.discriminator)
        variant = self.by_kind.get(kind) if isinstance(kind, str) else None
        if variant is None:
            raise ValidationError(self.invalid_message, field=self.discriminator)
        return variant.check(value)

    def restricted(self, kinds: Sequence[str]) -> OneOf:
        """The same, with only the variants of ``kinds`` (in that order)."""
        key = tuple(str(k) for k in kinds)
        if key == tuple(self.by_kind):
            return self
        found = self._restricted.get(key)
        if found is None:
            unknown = [k for k in key if k not in self.by_kind]
            if unknown:
                raise KeyError(unknown[0])
            type_message, required_message, invalid_message = self._templates
            found = OneOf([self.by_kind[k] for k in key], discriminator=self.discriminator,
                          type_message=type_message, required_message=required_message,
                          invalid_message=invalid_message)
            self._restricted[key] = found
        return found

    def body(self) -> Schema:
        return {"oneOf": [v.schema() for v in self.variants]}

    def children(self) -> Iterable[Field]:
        return self.variants
