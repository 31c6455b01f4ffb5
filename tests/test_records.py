"""perfsuite.records: typed round trips, the one validator's errors, versioned files and migrations."""

from __future__ import annotations

import enum
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.errors import PerfsuiteError
from perfsuite.records import Record, RecordError, dump, load, migration


class Kind(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclass(frozen=True)
class Round(Record):
    rate: float
    times: tuple[float, ...]


@dataclass(frozen=True)
class Run(Record):
    SCHEMA_VERSION: ClassVar[int] = 3
    name: str
    kind: Kind
    count: int
    rounds: tuple[Round, ...]
    best: Optional[Round] = None  # noqa: UP045 -- the typing.Optional spelling is supported too
    by_arm: dict[str, Round] = field(default_factory=dict)
    note: str | None = None


@migration(Run, 1, 2)
def migrate_1_to_2(data: dict) -> dict:
    """Schema 1 stored rounds as [rate, *times]."""
    rounds = [{"rate": r[0], "times": r[1:]} for r in data.pop("rounds")]
    return {**data, "rounds": rounds}


@migration(Run, 2, 3)
def migrate_2_to_3(data: dict) -> dict:
    """Schema 3 adds kind."""
    return {**data, "kind": "fast"}


finite = st.floats(allow_nan=False, allow_infinity=False)
rounds = st.builds(Round, rate=finite, times=st.lists(finite, max_size=4).map(tuple))
runs = st.builds(
    Run, name=st.text(), kind=st.sampled_from(Kind), count=st.integers(),
    rounds=st.lists(rounds, max_size=3).map(tuple), best=st.none() | rounds,
    by_arm=st.dictionaries(st.text(max_size=5), rounds, max_size=3), note=st.none() | st.text())


@given(runs)
def test_a_record_survives_as_dict_through_json_and_from_dict(run):
    assert Run.from_dict(json.loads(json.dumps(run.as_dict()))) == run


@given(runs)
def test_nested_records_stay_records_and_enums_stay_enums(run):
    back = Run.from_dict(json.loads(json.dumps(run.as_dict())))
    assert all(isinstance(r, Round) for r in back.rounds)
    assert all(isinstance(r, Round) for r in back.by_arm.values())
    assert isinstance(back.kind, Kind)


@given(runs)
def test_dump_then_load_gives_the_record_back(tmp_path_factory, run):
    path = tmp_path_factory.mktemp("r") / "run.json"
    dump(run, path)
    assert json.loads(path.read_text())["schema_version"] == Run.SCHEMA_VERSION
    assert load(path, Run) == run


def test_an_old_schema_loads_through_its_migrations(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema_version": 1, "name": "a", "count": 2, "rounds": [[4.0, 1.0, 2.0]]}))
    assert load(path, Run) == Run(name="a", kind=Kind.FAST, count=2, rounds=(Round(4.0, (1.0, 2.0)),))


def _error(tmp_path, content) -> RecordError:
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(RecordError) as caught:
        load(path, Run)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, PerfsuiteError)
    return caught.value


GOOD = {"schema_version": 3, "name": "a", "kind": "slow", "count": 1, "rounds": []}


@pytest.mark.parametrize("content, field, found", [
    ("{not json", "(file)", "line 1"),
    ([1, 2], "Run", "list"),
    ({**GOOD, "schema_version": 9}, "schema_version", "9"),
    ({**GOOD, "schema_version": "3"}, "schema_version", "'3'"),
    ({**GOOD, "count": "1"}, "count", "str"),
    ({**GOOD, "count": True}, "count", "bool"),
    ({**GOOD, "kind": "medium"}, "kind", "'medium'"),
    ({**GOOD, "rounds": [{"rate": 1.0}]}, "rounds[0].times", "no such key"),
    ({**GOOD, "rounds": [{"rate": "x", "times": []}]}, "rounds[0].rate", "str"),
    ({**GOOD, "by_arm": {"a": 3}}, "by_arm.a", "int"),
    ({**GOOD, "extra": 1}, "extra", "an unknown key"),
    ({**GOOD, "by_arm": {"x/y[1]": {"rate": 1.0}}}, 'by_arm."x/y[1]".times', "no such key"),
    ({k: v for k, v in GOOD.items() if k != "name"}, "name", "no such key"),
])
def test_a_bad_file_names_the_file_the_field_and_what_was_found(tmp_path, content, field, found):
    error = _error(tmp_path, content)
    assert error.field == field
    assert found in error.found


def test_a_missing_file_is_a_record_error(tmp_path):
    with pytest.raises(RecordError, match="missing.json"):
        load(tmp_path / "missing.json", Run)


def test_a_migration_goes_forward():
    with pytest.raises(ValueError):
        migration(Run, 3, 2)


@dataclass(frozen=True)
class Place(Record):
    DERIVED: ClassVar[tuple[str, ...]] = ("depth",)
    root: Path
    parts: tuple[str, ...] = ()

    @property
    def depth(self) -> int:
        return len(self.parts)


def test_a_path_is_written_as_text_and_read_back_as_a_path():
    place = Place(Path("/tmp/a"), ("x", "y"))
    assert place.as_dict() == {"root": "/tmp/a", "parts": ["x", "y"], "depth": 2}
    assert Place.from_dict(json.loads(json.dumps(place.as_dict()))) == place
    with pytest.raises(RecordError, match="root: expected Path, found int 3"):
        Place.from_dict({"root": 3})


def test_derived_keys_are_written_for_readers_and_skipped_when_read_back():
    assert Place.from_dict({"root": "a", "depth": 99}) == Place(Path("a"))
    with pytest.raises(RecordError, match="unknown key"):
        Place.from_dict({"root": "a", "width": 1})


@dataclass(frozen=True)
class Band(Record):
    low: float
    high: float

    def __post_init__(self):
        if self.low > self.high:
            raise self.invalid(("high",), f"at least low ({self.low})", f"{self.high}")


@dataclass(frozen=True)
class Bands(Record):
    bands: dict[str, Band]


def test_an_error_keeps_its_path_as_parts_and_quotes_keys_that_are_not_plain_names():
    with pytest.raises(RecordError) as caught:
        Bands.from_dict({"bands": {"a.b": {"low": 1, "high": "x"}}}, "bands.yaml")
    error = caught.value
    assert error.parts == ("bands", "a.b", "high")
    assert str(error) == 'bands.yaml: bands."a.b".high: expected float, found str \'x\''


def test_an_unknown_key_is_named_by_its_own_path():
    with pytest.raises(RecordError) as caught:
        Bands.from_dict({"bands": {"a": {"low": 1, "high": 2, "mid": 3}}})
    assert (caught.value.parts, caught.value.expected, caught.value.found) == (
        ("bands", "a", "mid"), "one of the keys low, high", "an unknown key")


def test_a_post_init_check_raised_with_invalid_names_the_field_path():
    with pytest.raises(RecordError) as caught:
        Bands.from_dict({"bands": {"a": {"low": 2, "high": 1}}}, "bands.yaml")
    assert str(caught.value) == "bands.yaml: bands.a.high: expected at least low (2.0), found 1.0"
    assert caught.value.parts == ("bands", "a", "high")
    with pytest.raises(RecordError, match=r"^Band: high: expected at least low"):
        Band(2.0, 1.0)  # built in code: the record's own name stands for the file


def test_a_record_error_keeps_its_parts_across_pickling():
    error = RecordError("f.json", "a[0]", "int", "str 'x'", ("a", 0))
    back = pickle.loads(pickle.dumps(error))
    assert (back.where, back.field, back.parts, str(back)) == ("f.json", "a[0]", ("a", 0), str(error))
