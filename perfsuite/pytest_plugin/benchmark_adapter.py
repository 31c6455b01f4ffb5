"""Everything perfsuite uses of pytest-benchmark, in one module.

pytest-benchmark gives us its ``benchmark`` fixture (``pedantic`` and ``extra_info``), its saved runs
(``--benchmark-autosave`` / ``--benchmark-compare``) and its machine-info hook. Some of that is not
public API (the session object behind ``config``, the ``Metadata``/``Stats`` behind ``benchmark.stats``),
so every access is here and ``compatibility_problems`` names whatever a pytest-benchmark release no
longer provides; the plugin refuses to start with that message rather than misjudging runs.

What pytest-benchmark's stats hold. ``pedantic`` times whole rounds, and perfsuite sizes rounds by a
time budget, so round times say nothing of speed. After the rounds, ``time_per_unit`` replaces them by
each round's time per unit of work, so ``stats.ops`` is units per second and pytest-benchmark's table,
``--benchmark-compare(-fail)``, its histogram, ``pytest-benchmark compare`` and every tool reading its
JSON rank by speed. ``extra_info["stats_unit"]`` names the unit, and so does the benchmark's group (e.g.
'loaders, s/sample'), so that each of pytest-benchmark's tables ranks times of one kind:

- ``s/sample``: dataset benchmarks and the tf.data service's rounds (ops = samples/s);
- ``s/step``: step and epoch benchmarks (ops = step calls/s) and ``s/step fed by the pipeline`` for the
  input-bound share (the real pipeline's side: its ops is the fed step's speed);
- ``s/sample of A`` (``s/round of A`` when its sides return seconds for a fixed amount of work):
  same-run ratios. The ratio of two speeds is not a time; the time per sample of its first side is, and
  the ratio itself, with its rounds and interval, is in ``extra_info``;
- ``s/round``: work whose unit is the round (whole rounds, as pytest-benchmark timed them through
  ``time_rounds``, for work with no smaller unit: an emulated round, a calibration); the group says so
  until ``time_per_unit`` names a smaller unit.

Every benchmark's stats come through here: ``time_rounds`` is the only caller of ``pedantic``.

The plugin also sets pytest-benchmark's table to show throughput first (``table_defaults``) unless the
user chose its columns or sort.
"""

from __future__ import annotations

import inspect
import json
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SESSION_ATTRIBUTE = "_benchmarksession"
FINGERPRINT_INFO = "perfsuite_fingerprint"  # our key in pytest-benchmark's machine_info
STATS_UNIT = "stats_unit"  # extra_info: what one value of pytest-benchmark's stats is the time of
ROUND_UNIT = "s/round"
TABLE_COLUMNS = ["ops", "median", "iqr", "rounds"]  # ops first: samples (or steps) per second
TABLE_SORT = "mean"  # ascending mean time per unit: the fastest (highest ops) first


def compatibility_problems() -> list[str]:
    """What perfsuite relies on in pytest-benchmark and this installed release lacks (empty: all there)."""
    from pytest_benchmark import fixture, session
    from pytest_benchmark.storage.file import FileStorage

    problems = []
    parameters = inspect.signature(fixture.BenchmarkFixture.pedantic).parameters
    for name in ("target", "rounds", "iterations", "warmup_rounds"):
        if name not in parameters:
            problems.append(f"BenchmarkFixture.pedantic has no {name!r} parameter")
    for name in ("compared_mapping", "handle_loading"):
        if not hasattr(session.BenchmarkSession, name):
            problems.append(f"BenchmarkSession has no {name!r}")
    if not callable(getattr(FileStorage, "load", None)):
        problems.append("FileStorage has no load()")
    problems += _stats_problems()
    return problems


def _stats_problems() -> list[str]:
    """time_per_unit replaces ``benchmark.stats.stats`` (a ``Metadata``'s ``Stats``) by a fresh one filled
    with ``update`` and names the unit in ``Metadata.group``; ``ops`` must be values per second of their
    total."""
    from pytest_benchmark import stats

    owner = SimpleNamespace(name="probe", fullname="probe", group=None, param=None, params=None, extra_info={},
                            cprofile_stats=None)
    try:
        metadata = stats.Metadata(owner, iterations=1, options={})
        fresh = type(metadata.stats)()
        for value in (0.5, 0.25):
            fresh.update(value)
        metadata.stats = fresh
        metadata.group = "probe, s/sample"
        ops = metadata.stats.ops
        if metadata.as_dict()["group"] != metadata.group:
            return ["pytest_benchmark.stats.Metadata.as_dict does not write its group"]
    except Exception as error:  # noqa: BLE001 - any failure means the stats cannot be filled this way
        return [f"pytest_benchmark.stats.Metadata/Stats cannot be filled with per-unit times ({error!r})"]
    if abs(ops - 2 / 0.75) > 1e-9:
        return [f"pytest_benchmark.stats.Stats.ops: expected values per second of their total, found {ops!r}"]
    return []


def _session(config) -> Any:
    return getattr(config, SESSION_ATTRIBUTE, None)


def enabled(benchmark) -> bool:
    """False when pytest-benchmark is disabled (e.g. under xdist): pedantic then runs its target once."""
    return not getattr(benchmark, "disabled", False)


def time_rounds(benchmark, work: Callable[[], Any], *, rounds: int) -> Any:
    """``work`` timed by pytest-benchmark as ``rounds`` rounds; returns the last round's result (what
    ``pedantic`` returns). A disabled pytest-benchmark runs it once: callers that need every round
    collect them themselves. Its stats are round times, named ``s/round`` in ``extra_info`` and in the
    group, until ``time_per_unit`` names a smaller unit."""
    result = benchmark.pedantic(work, rounds=rounds, iterations=1, warmup_rounds=0)
    if benchmark.extra_info.setdefault(STATS_UNIT, ROUND_UNIT) == ROUND_UNIT:
        metadata = getattr(benchmark, "stats", None)
        if metadata is not None:
            metadata.group = _with_unit(metadata.group, ROUND_UNIT)
    return result


def _with_unit(group: str | None, unit: str) -> str:
    """The group of pytest-benchmark's table with ``unit`` in place of the round unit named before."""
    base = None if group == ROUND_UNIT else (group or "").removesuffix(f", {ROUND_UNIT}") or None
    return f"{base}, {unit}" if base else unit


def time_per_unit(benchmark, seconds: Sequence[float], *, unit: str) -> bool:
    """pytest-benchmark's stats become ``seconds`` (one value per round: its time per unit of work, e.g.
    the round's steady time / its samples); ``extra_info["stats_unit"]`` and the group of pytest-benchmark's
    table (e.g. 'loaders, s/sample') say ``unit``, so a table ranks only times of one kind. Only stats
    that hold round times are replaced: the first measurement timed through pytest-benchmark owns them
    (later ones, and a disabled pytest-benchmark, leave them as they are). Returns whether it replaced."""
    metadata = getattr(benchmark, "stats", None)
    if metadata is None or benchmark.extra_info.get(STATS_UNIT, ROUND_UNIT) != ROUND_UNIT or not seconds:
        return False
    if not all(value > 0 for value in seconds):
        raise ValueError(f"{benchmark.fullname}: seconds per {unit}: expected positive times, found {list(seconds)}")
    fresh = type(metadata.stats)()
    for value in seconds:
        fresh.update(float(value))
    metadata.stats = fresh
    metadata.group = _with_unit(metadata.group, unit)  # its table compares like with like
    benchmark.extra_info[STATS_UNIT] = unit
    return True


def table_defaults(config) -> None:
    """pytest-benchmark's table shows ops (units per second) first and ranks the fastest first, unless the
    user chose ``--benchmark-columns`` / ``--benchmark-sort`` (on the command line, PYTEST_ADDOPTS or
    addopts). Called before pytest-benchmark's own ``pytest_configure`` (trylast) reads the options."""
    given = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
             *config.getini("addopts")]
    for option, name, value in (("--benchmark-columns", "benchmark_columns", TABLE_COLUMNS),
                                ("--benchmark-sort", "benchmark_sort", TABLE_SORT)):
        if not any(str(arg).startswith(option) for arg in given):
            setattr(config.option, name, value)


def default_group(benchmark, group: str) -> None:
    """The benchmark's group in pytest-benchmark's table (one table per group: loaders are not ranked
    against training steps), unless ``@pytest.mark.benchmark(group=...)`` set one."""
    if getattr(benchmark, "group", None) is None:
        benchmark.group = group


def compare_requested(config) -> bool:
    """Whether ``--benchmark-compare`` was given."""
    return bool(getattr(_session(config), "compare", None))


def compared_runs(config) -> dict:
    """The saved runs ``--benchmark-compare`` loaded: {path: {fullname: benchmark}} (empty if none)."""
    return getattr(_session(config), "compared_mapping", None) or {}


def saved_runs(config) -> list[dict]:
    """Every run saved in pytest-benchmark's storage for this platform, oldest first (each the JSON
    document pytest-benchmark wrote: ``machine_info``, ``datetime``, ``benchmarks``)."""
    storage = getattr(_session(config), "storage", None)
    if storage is None:
        return []
    return [data for _, data in storage.load()]


def stored_runs(directory: Path) -> list[tuple[Path, dict]]:
    """Every run saved in a pytest-benchmark storage directory (``DIR/<machine id>/NNNN_*.json``), oldest
    first by their ``datetime``: (path, the JSON document). A file that is not such a run is a
    PerfsuiteError naming it."""
    from perfsuite.errors import PerfsuiteError

    directory = Path(directory)
    if not directory.is_dir():
        raise PerfsuiteError(f"{directory}: expected pytest-benchmark's storage directory (the runs "
                             f"--benchmark-autosave saves), found {'a file' if directory.exists() else 'nothing'}")
    runs = []
    for path in sorted(directory.glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise PerfsuiteError(f"{path}: expected a saved pytest-benchmark run (JSON), found unreadable text "
                                 f"({error})") from None
        if not (isinstance(data, dict) and isinstance(data.get("benchmarks"), list)
                and isinstance(data.get("datetime"), str)):
            raise PerfsuiteError(f"{path}: expected a saved pytest-benchmark run (keys 'benchmarks', 'datetime'), "
                                 f"found {type(data).__name__} without them")
        runs.append((path, data))
    return sorted(runs, key=lambda run: run[1]["datetime"])


def on_hardware(runs: Sequence, fingerprint) -> list:
    """The saved runs (documents, or (path, document) pairs) recorded on ``fingerprint``'s hardware, by the
    fingerprint each carries in ``machine_info``; runs without one, or saved by an older perfsuite in
    another format, are left out: their figures mean nothing here."""
    from perfsuite.measure.machine import MachineFingerprint, match

    kept = []
    for run in runs:
        data = run[1] if isinstance(run, tuple) else run
        recorded = (data.get("machine_info") or {}).get(FINGERPRINT_INFO)
        try:
            if recorded and match(MachineFingerprint.from_dict(recorded), fingerprint).matched:
                kept.append(run)
        except ValueError:
            continue
    return kept


def extra_info(benchmark) -> dict:
    """The benchmark's ``extra_info``: what lands in the saved JSON next to pytest-benchmark's stats."""
    return benchmark.extra_info
