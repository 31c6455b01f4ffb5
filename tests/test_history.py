"""`perfsuite history`: synthetic saved runs in pytest-benchmark's format, a planted 20 % step found at its
commit, none in a flat series, the filters, other hardware left out, and the command's output files."""

import dataclasses
import json
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest

from perfsuite.measure.machine import machine_fingerprint
from perfsuite.pytest_plugin.benchmark_adapter import FINGERPRINT_INFO
from perfsuite.tools.history import build_history

RUNS, STEP_AT, NOISE = 20, 12, 0.02
STEPPED = "benchmarks/test_loaders.py::test_loader[stepped]"
FLAT = "benchmarks/test_loaders.py::test_loader[flat]"


@pytest.fixture(scope="module")
def fingerprint():
    return machine_fingerprint()


def _commit(index: int) -> str:
    return f"{index:04d}" + "a" * 36


def _bench(fullname: str, samples_per_s: float, rng) -> dict:
    rounds = list(samples_per_s * rng.normal(1, NOISE / 2, 5))
    return {"fullname": fullname, "name": fullname.split("::")[-1], "stats": {"ops": samples_per_s},
            "extra_info": {"perfsuite_profile": "quick", "samples_per_s": samples_per_s,
                           "samples_per_s_rounds": rounds}}


def write_runs(storage, fingerprint, *, seed: int, machine: str = "Linux-CPython-3.11-64bit") -> None:
    """RUNS runs a day apart: the stepped benchmark 20 % slower from commit STEP_AT on, both with noise."""
    rng = np.random.default_rng(seed)
    directory = storage / machine
    directory.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for index in range(RUNS):
        stepped = 1000.0 * (0.8 if index >= STEP_AT else 1.0) * rng.normal(1, NOISE)
        flat = 500.0 * rng.normal(1, NOISE)
        run = {"machine_info": {FINGERPRINT_INFO: fingerprint.as_dict()}, "commit_info": {"id": _commit(index)},
               "datetime": (start + timedelta(days=index)).isoformat(), "version": "5.2.3",
               "benchmarks": [_bench(STEPPED, stepped, rng), _bench(FLAT, flat, rng)]}
        (directory / f"{index + 1:04d}_{_commit(index)[:8]}.json").write_text(json.dumps(run))


@pytest.mark.parametrize("seed", range(5))
def test_a_planted_step_is_found_at_its_commit_and_a_flat_series_has_none(tmp_path, fingerprint, seed):
    write_runs(tmp_path, fingerprint, seed=seed)
    history = {series.benchmark_id: series for series in build_history(tmp_path, fingerprint)}
    stepped, flat = history[f"quick::{STEPPED.split('benchmarks/')[1]}"], history[f"quick::{FLAT.split('benchmarks/')[1]}"]
    assert len(stepped.points) == len(flat.points) == RUNS
    (change,) = stepped.changes
    assert (change.before_commit, change.after_commit) == (_commit(STEP_AT - 1), _commit(STEP_AT))
    assert change.shift_low <= change.shift <= change.shift_high < 0
    assert change.shift == pytest.approx(-0.2, abs=0.05)
    assert flat.changes == ()


def test_since_keyword_and_other_hardware_filter_the_runs(tmp_path, fingerprint):
    write_runs(tmp_path, fingerprint, seed=0)
    other = dataclasses.replace(fingerprint, cores=(fingerprint.cores or 1) + 64)
    write_runs(tmp_path, other, seed=1, machine="Other-CPython-3.11-64bit")
    assert len(build_history(tmp_path, fingerprint)) == 2  # the other machine's runs are not series of their own
    assert all(len(s.points) == RUNS for s in build_history(tmp_path, fingerprint))
    (only,) = build_history(tmp_path, fingerprint, keyword="[flat]")
    assert only.benchmark_id.endswith("[flat]")
    recent = build_history(tmp_path, fingerprint, since=date(2026, 11, 16))
    assert all(len(s.points) == RUNS - 15 for s in recent)


def test_the_command_writes_a_plot_per_benchmark_and_a_page(tmp_path, fingerprint):
    storage, out = tmp_path / ".benchmarks", tmp_path / "history"
    write_runs(storage, fingerprint, seed=0)
    result = subprocess.run([sys.executable, "-m", "perfsuite", "history", "--storage", str(storage),
                             "--out", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert f"between {_commit(STEP_AT - 1)[:10]}..{_commit(STEP_AT)[:10]}" in result.stdout
    page = (out / "history.md").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 2 and all(f"({name})" in page for name in pngs)
    assert f"{_commit(STEP_AT - 1)[:10]}..{_commit(STEP_AT)[:10]}" in page


def test_a_file_that_is_not_a_saved_run_is_named(tmp_path, fingerprint):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "0001_x.json").write_text("[1, 2]")
    result = subprocess.run([sys.executable, "-m", "perfsuite", "history", "--storage", str(tmp_path)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 2
    assert "0001_x.json: expected a saved pytest-benchmark run" in result.stderr
    assert "Traceback" not in result.stderr


def test_fewer_runs_than_a_change_point_needs_say_so_not_no_change(tmp_path, fingerprint):
    storage, out = tmp_path / ".benchmarks", tmp_path / "history"
    write_runs(storage, fingerprint, seed=0)
    for extra in sorted((storage / "Linux-CPython-3.11-64bit").glob("*.json"))[3:]:
        extra.unlink()
    (stepped, _flat) = build_history(storage, fingerprint)
    assert len(stepped.points) == 3 and not stepped.searched and stepped.changes == ()
    result = subprocess.run([sys.executable, "-m", "perfsuite", "history", "--storage", str(storage),
                             "--out", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    said = "not enough runs (3 of 6) to look for change points"
    assert result.stdout.count(said) == 2
    page = (out / "history.md").read_text()
    assert page.count(said.capitalize()) == 2
    assert "No change point" not in page
