"""Everything perfsuite uses of pytest-benchmark, in one module.

pytest-benchmark gives us its ``benchmark`` fixture (``pedantic`` and ``extra_info``), its saved runs
(``--benchmark-autosave`` / ``--benchmark-compare``) and its machine-info hook. Some of that is not
public API (the session object behind ``config``), so every access is here and ``compatibility_problems``
names whatever a pytest-benchmark release no longer provides; the plugin refuses to start with that
message rather than misjudging runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

SESSION_ATTRIBUTE = "_benchmarksession"


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
    return problems


def _session(config) -> Any:
    return getattr(config, SESSION_ATTRIBUTE, None)


def enabled(benchmark) -> bool:
    """False when pytest-benchmark is disabled (e.g. under xdist): pedantic then runs its target once."""
    return not getattr(benchmark, "disabled", False)


def run_rounds(benchmark, work: Callable[[], Any], *, rounds: int) -> Any:
    """``work`` timed by pytest-benchmark as ``rounds`` rounds; returns the last round's result (what
    ``pedantic`` returns). A disabled pytest-benchmark runs it once: callers that need every round
    collect them themselves."""
    return benchmark.pedantic(work, rounds=rounds, iterations=1, warmup_rounds=0)


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


def extra_info(benchmark) -> dict:
    """The benchmark's ``extra_info``: what lands in the saved JSON next to pytest-benchmark's stats."""
    return benchmark.extra_info
