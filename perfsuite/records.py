"""The one record model: frozen dataclasses that go to and from JSON typed, with one validator and
versioned files that older schemas reach through explicit migrations.

A `Record` subclass is a frozen dataclass. `as_dict()` turns it into JSON-ready values, nesting records
(never flattening them into dicts read back by key); `from_dict()` checks every field against its
annotation and builds the nested records again. Supported annotations: Record subclasses, enums, str,
int, float, bool, None, Optional/unions of those, tuple[T, ...], tuple[A, B], list[T], dict[str, T], and
bare dict/list for free-form JSON.

`dump(record, path)` writes `{"schema_version": N, ...}` atomically; `load(path, cls)` reads it, applies
the migrations registered for `cls` (`migrate_N_to_M` functions, one schema step each) up to
`cls.SCHEMA_VERSION`, and validates. Every error is a RecordError naming the file, the field path, what
was expected and what was found; a key that is not a plain name is quoted in the path (`a."x/y".b`), and
an unknown key is named by its own path. A check the annotations cannot state goes in `__post_init__`,
raising `self.invalid(...)` so that the error names the field's path too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from perfsuite.errors import PerfsuiteError
from perfsuite.files import write_atomic

R = TypeVar("R", bound="Record")
Migration = Callable[[dict], dict]


class RecordError(PerfsuiteError, ValueError):
    """A record (or its file) does not match its schema: names where, the field, the expectation and
    what was found. ``parts`` is the field's path as keys and list indices (empty: the whole record
    or file), for callers that name fields in their own words."""

    def __init__(self, where: str, field: str, expected: str, found: str, parts: tuple[str | int, ...] = ()):
        self.where = where
        self.field = field
        self.expected = expected
        self.found = found
        self.parts = tuple(parts)
        super().__init__(f"{where}: {field}: expected {expected}, found {found}")

    def __reduce__(self):  # keeps the attributes across pickling (worker processes)
        return (type(self), (self.where, self.field, self.expected, self.found, self.parts))


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every record written to or read from disk. Subclasses are frozen dataclasses; a subclass
    written to its own file sets SCHEMA_VERSION and registers its migrations with `migration`."""

    SCHEMA_VERSION: ClassVar[int] = 1
    DERIVED: ClassVar[tuple[str, ...]] = ()  # properties written for readers, skipped when read back

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values: nested records as dicts, enums as their values,
        tuples as lists, paths as text; then the DERIVED properties."""
        names = [field.name for field in dataclasses.fields(self)] + list(self.DERIVED)
        return {name: _to_plain(getattr(self, name)) for name in names}

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> Self:
        """Build the record from `data`, checking every field against its annotation; raises
        RecordError naming `where` (default: the class name) and the field path."""
        return _from_plain(cls, data, where or cls.__name__, ())

    def invalid(self, parts: tuple[str | int, ...], expected: str, found: str) -> RecordError:
        """The error `__post_init__` raises for a value its annotation admits but the record does not;
        `parts` is the path within this record (from_dict adds the file and the record's own path)."""
        return RecordError(type(self).__name__, key_path(parts) or type(self).__name__, expected, found, parts)


_MIGRATIONS: dict[type, dict[int, tuple[int, Migration]]] = {}


def migration(cls: type[Record], old: int, new: int) -> Callable[[Migration], Migration]:
    """Register `function(data) -> data` that turns schema `old` of `cls` into schema `new`."""
    if new <= old:
        raise ValueError(f"a migration goes forward: {old} → {new}")

    def register(function: Migration) -> Migration:
        _MIGRATIONS.setdefault(cls, {})[old] = (new, function)
        return function
    return register


def migrate(cls: type[Record], data: Any, where: str) -> dict:
    """`data` (a dict with schema_version) brought to cls.SCHEMA_VERSION through the registered
    migrations; the result has no schema_version key."""
    if not isinstance(data, dict):
        raise RecordError(where, cls.__name__, "a JSON object", type(data).__name__)
    version = data.get("schema_version")
    if type(version) is not int:
        raise RecordError(where, "schema_version", f"an integer (current: {cls.SCHEMA_VERSION})", repr(version))
    data = {key: value for key, value in data.items() if key != "schema_version"}
    steps = _MIGRATIONS.get(cls, {})
    while version != cls.SCHEMA_VERSION:
        if version not in steps:
            known = sorted({*steps, cls.SCHEMA_VERSION})
            raise RecordError(where, "schema_version", f"one of {known}", repr(version))
        version, function = steps[version]
        data = function(data)
    return data


def versioned(record: Record) -> dict:
    """The record's JSON object as its file holds it: schema_version first, then as_dict()."""
    return {"schema_version": type(record).SCHEMA_VERSION, **record.as_dict()}


def dumps(record: Record) -> str:
    """The record as versioned JSON text."""
    return json.dumps(versioned(record), indent=2) + "\n"


def loads(text: str, cls: type[R], where: str) -> R:
    """Read versioned JSON text (from `where`) as `cls`, through its migrations."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecordError(where, "(file)", "JSON", f"{error.msg} at line {error.lineno}") from None
    return cls.from_dict(migrate(cls, data, where), where)


def dump(record: Record, path: Path | str) -> None:
    """Write the record to `path` as versioned JSON, atomically."""
    write_atomic(path, dumps(record))


def load(path: Path | str, cls: type[R]) -> R:
    """Read `path` as `cls`: a missing or unreadable file, bad JSON, an unknown schema version or a
    field that does not match raises RecordError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(str(path), "(file)", "a readable UTF-8 JSON file", str(error)) from None
    return loads(text, cls, str(path))


def _to_plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.as_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _to_plain(item) for key, item in value.items()}
    return value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def key_path(parts: tuple[str | int, ...]) -> str:
    """A field path as text: `a.b[0]`; a key that is not a plain name is quoted: `a."x/y[1]".b`."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if _BARE_KEY.match(part) else json.dumps(part, ensure_ascii=False)
            text += f".{name}" if text else name
    return text


def found_text(value: Any) -> str:
    """A value as the errors show what was found: its type and a short repr (None: null)."""
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _wrong(where: str, parts: tuple, expected: str, found: str, whole: str = "") -> RecordError:
    return RecordError(where, key_path(parts) or whole, expected, found, parts)


def _from_plain(annotation: Any, value: Any, where: str, parts: tuple) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if annotation in (dict, list):  # free-form JSON (e.g. a machine fingerprint): checked for its type only
        if isinstance(value, annotation):
            return value
        raise _wrong(where, parts, "an object" if annotation is dict else "a list", found_text(value))
    if annotation is None or annotation is type(None):
        if value is None:
            return None
        raise _wrong(where, parts, "null", found_text(value))
    if origin in (typing.Union, types.UnionType):
        return _from_union(annotation, args, value, where, parts)
    if origin in (tuple, list):
        return _from_sequence(origin, args, value, where, parts)
    if origin is dict:
        return _from_mapping(args, value, where, parts)
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return _from_record(annotation, value, where, parts)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in annotation)
            raise _wrong(where, parts, f"one of {choices}", found_text(value)) from None
    return _from_scalar(annotation, value, where, parts)


def _from_union(annotation, args, value, where, parts):
    if value is None and type(None) in args:
        return None
    options = [arg for arg in args if arg is not type(None)]
    if len(options) == 1:  # Optional[T]: T's own error, which names the nested field
        return _from_plain(options[0], value, where, parts)
    for option in options:
        try:
            return _from_plain(option, value, where, parts)
        except RecordError:
            continue
    raise _wrong(where, parts, _describe(annotation), found_text(value))


def _from_sequence(origin, args, value, where, parts):
    if not isinstance(value, (list, tuple)):
        raise _wrong(where, parts, f"a list ({_describe(origin)})", found_text(value))
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise _wrong(where, parts, f"a list of {len(args)} items", f"{len(value)} items")
        items = [_from_plain(arg, item, where, (*parts, i)) for i, (arg, item) in enumerate(zip(args, value))]
    else:
        item_type = args[0] if args else Any
        items = [_from_plain(item_type, item, where, (*parts, i)) for i, item in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _from_mapping(args, value, where, parts):
    if not isinstance(value, dict):
        raise _wrong(where, parts, "an object", found_text(value))
    item_type = args[1] if len(args) == 2 else Any
    for key in value:
        if not isinstance(key, str):
            raise _wrong(where, parts, "string keys", found_text(key))
    return {key: _from_plain(item_type, item, where, (*parts, key)) for key, item in value.items()}


def _from_record(cls, value, where, parts):
    if not isinstance(value, dict):
        raise _wrong(where, parts, f"an object ({cls.__name__})", found_text(value), cls.__name__)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in value:  # an unknown key is named by its own path
        if key not in fields and key not in cls.DERIVED:
            name = key if isinstance(key, str) else repr(key)
            raise _wrong(where, (*parts, name), f"one of the keys {', '.join(fields)}", "an unknown key")
    hints = _hints(cls)
    arguments = {}
    for name, spec in fields.items():
        if name not in value:
            if spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
                raise _wrong(where, (*parts, name), "a value (required key)", "no such key")
            continue
        arguments[name] = _from_plain(hints[name], value[name], where, (*parts, name))
    try:
        return cls(**arguments)
    except RecordError as error:  # a record's own __post_init__ check, raised with Record.invalid
        raise _wrong(where, (*parts, *error.parts), error.expected, error.found, cls.__name__) from None
    except (TypeError, ValueError) as error:  # any other __post_init__ check
        raise _wrong(where, parts, f"a valid {cls.__name__}", str(error), cls.__name__) from None


def _from_scalar(annotation, value, where, parts):
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation in (str, bool):
        if type(value) is annotation:
            return value
    elif annotation is Path:
        if isinstance(value, str):
            return Path(value)
    else:
        raise TypeError(f"{where}: {key_path(parts)}: records cannot hold {_describe(annotation)}")
    raise _wrong(where, parts, _describe(annotation), found_text(value))
