"""Shared test fixtures and hypothesis profiles.

PERFSUITE_HYPOTHESIS_PROFILE=thorough runs many more examples than the CI default.
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("PERFSUITE_HYPOTHESIS_PROFILE", "ci"))


# --- data fixtures: the "tiny" synthetic corpus and its cache, built once per run -------------------


def _data_root(tmp_path_factory):
    """PERFSUITE_DATA_DIR when set; otherwise one directory shared by every xdist worker of this run.

    build_corpus publishes by an atomic rename and build_cache writes each file atomically, so
    workers that race to build the same corpus all end up with one complete copy.
    """
    if os.environ.get("PERFSUITE_DATA_DIR"):
        return Path(os.environ["PERFSUITE_DATA_DIR"])
    return tmp_path_factory.getbasetemp().parent / "perfsuite-data"


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory):
    """The "tiny" preset corpus directory (LJSpeech layout). Tests must not modify it."""
    from perfsuite.data.corpus import PRESETS, build_corpus

    return build_corpus(PRESETS["tiny"], root=_data_root(tmp_path_factory))


@pytest.fixture(scope="session")
def tiny_cache(tiny_corpus):
    """The precomputed cache (default MelConfig) of the tiny corpus. Tests must not modify it."""
    from perfsuite.data.corpus import build_cache

    return build_cache(tiny_corpus)


# --- xdist: tests sharing a costly module-scoped fixture go to one worker -----------------------------

# Module-scoped fixtures that run a whole diagnosis or start a tf.data service cluster (tens of seconds).
# Under xdist every worker that runs one of their tests would run the fixture again; the xdist_group
# marker sends those tests to one worker, the rest are spread as usual. Not --dist in pytest.ini's
# addopts: without -n it leaves pytest-benchmark's --benchmark-json empty (the benchmark runs read this
# pytest.ini too).
SHARED_RUNS = {"test_diagnose.py": "run", "test_pipeline_inspect.py": "measured",
               "test_service.py": "shared_cluster"}
# Of those, the ones that take tens of seconds even alone are end-to-end runs: their tests are marked slow
# (pytest.ini). A run given no -m leaves every slow test out, so plain `pytest -n auto` stays fast; `-m slow`
# runs them (not in pytest.ini's addopts: the benchmark runs read that file too).
SLOW_RUNS = {"test_diagnose.py": "run"}  # a whole `perfsuite diagnose` through the CLI, a 60 s budget


def pytest_configure(config):
    """-n without --dist: the controller schedules by group (loadgroup) and each worker marks the groups
    in its node ids (xdist derives that on a worker from the command line alone, hence both here)."""
    worker = getattr(config, "workerinput", None)
    argv = worker["mainargv"] if worker else sys.argv
    if any(arg == "--dist" or arg.startswith("--dist=") for arg in argv):
        return
    if worker:
        config.option.loadgroup = True
    elif getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        fixture = SHARED_RUNS.get(item.path.name)
        if fixture is not None and fixture in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(f"{item.path.name}::{fixture}"))
        if SLOW_RUNS.get(item.path.name) in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if not config.option.markexpr:
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
