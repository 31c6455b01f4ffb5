"""`perfsuite selftest`'s smoke mode end to end (tiny budget, 2 trials, the smoke profile): the command
finishes, and its summary holds every path measured or skipped with a reason, every plant certified,
and rows for 0, 5, 10, 20 and 40 %. Structure only: no figure is asserted (a smoke run's rounds are too
short to measure a plant; it may say so). Marked slow: about a minute of fresh processes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfsuite.tools.detection.records import LEVELS, PATHS, SKIPPED, SelftestReport, load_report

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--budget", "60", "--trials", "2", "--profile", "smoke", "--history-runs", "3"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("selftest")
    results = out / "results.md"
    results.write_text("# results\n")
    command = [sys.executable, "-m", "perfsuite", "selftest", *SMOKE, "--json", str(out / "selftest.json"),
               "--report", str(out / "report"), "--results", str(results), "--data-dir", str(out / "data")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    return done, load_report(out / "selftest.json"), out


def test_the_smoke_run_finishes_without_a_traceback(smoke):
    done, _, _ = smoke
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a plant failed its check (short rounds)
    assert "Traceback" not in done.stdout + done.stderr


def test_every_path_is_reported_or_skipped_with_a_reason(smoke):
    _, report, _ = smoke
    assert [curve.path for curve in report.curves] == list(PATHS)
    for curve in report.curves:
        if curve.status == SKIPPED:
            assert curve.reason
        else:
            assert [level.level for level in curve.levels] == list(LEVELS)
            assert curve.false_alarm
    assert report.curve("ab").status == SKIPPED and "not selected" in report.curve("ab").reason


def test_every_plant_is_checked_and_a_failed_one_gives_no_rate(smoke):
    _, report, _ = smoke
    measured = [curve for curve in report.curves if curve.status != SKIPPED]
    assert measured, "the smoke run measured no path"
    for curve in measured:
        for level in curve.levels:
            if level.level == 0:
                assert level.plant is None
                continue
            assert level.plant is not None and level.plant.level == level.level
            if level.plant.failed:
                assert level.rate is None and level.withheld == level.plant.reason


def test_the_table_and_files_hold_every_share(smoke):
    done, report, out = smoke
    printed = done.stdout.splitlines()
    for level in LEVELS:
        assert any(line.strip().startswith(f"{level:.0%}") for line in printed), done.stdout
    assert {gate.decision for gate in report.gates} <= {"pass", "fail", "inconclusive", "skipped"}
    assert all(gate.reason for gate in report.gates if gate.decision == "skipped")
    section = (out / "results.md").read_text()
    assert section.startswith("# results\n") and "### perfsuite selftest" in section
    assert (out / "report" / "detection-curve.png").stat().st_size > 0
    assert json.loads((out / "selftest.json").read_text())["schema_version"] == SelftestReport.SCHEMA_VERSION
    assert "work 10%: FLAGGED (float ops per sample +10.00%)" in done.stderr
    assert "saved: the smallest slowdown these 3 runs can flag" in done.stderr


def test_every_plant_is_certified_exact_in_work_and_the_fingerprint_catches_it(smoke):
    _, report, _ = smoke
    work = report.curve("work")
    assert [level.flagged for level in work.levels] == [0, 1, 1, 1, 1]
    assert all(level.plant.ok and level.plant.work == pytest.approx(level.level, abs=1e-6)
               for level in work.levels if level.level > 0)
