"""perfsuite selftest's pieces on synthetic numbers: the plant check (a broken plant refused), the
shares and their intervals, the smallest slowdown caught, the gates decided by the interval, option
parsing, and the records read back. No TensorFlow pipeline, no timing."""

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfsuite.measure import timing
from perfsuite.records import RecordError
from perfsuite.tools.cli import main
from perfsuite.tools.detection import command, curve
from perfsuite.tools.detection.plant import BATCH, extra_units
from perfsuite.tools.detection.records import (
    LEVELS,
    GateDecision,
    Level,
    PathCurve,
    SelftestReport,
    Settings,
    load_report,
    write_report,
)
from perfsuite.verdict.baselines import load_ratios

SHIPPED_RATIOS = load_ratios(Path(__file__).parents[1] / "benchmarks" / "baselines" / "ratios.yaml")
SETTINGS = Settings(paths=("gates", "saved"), levels=LEVELS, trials=20, budget_s=1200.0, profile="quick",
                    history_runs=10, alpha=0.01, min_effect=0.10)


# ----------------------------------------------------------------------------------------- the plant


def test_every_planted_share_is_a_whole_number_of_utterances():
    assert [extra_units(level) for level in LEVELS] == [0, 1, 2, 4, 8]
    assert BATCH == 20
    with pytest.raises(ValueError, match="whole number of utterances"):
        extra_units(0.03)
    with pytest.raises(ValueError, match="planted share"):
        extra_units(-0.1)


class FakeArm:
    """A round of `units` units of work on a fake clock: seconds = units x unit_s, plus a fixed seam."""

    def __init__(self, units: float, unit_s: float = 0.01, seam_s: float = 0.0):
        self.seconds = units * unit_s + seam_s

    def __call__(self) -> float:
        return self.seconds


def _measured_plants(arms: dict, rounds: int = 8, tolerance: float = 0.3) -> dict:
    """The plant check of each planted arm from interleaved rounds of the arms (round values: seconds)."""
    result = timing.interleave_rounds(arms, rounds=rounds, warmup_rounds=0)
    genuine = result.values["0"]
    return {float(label): curve.check_plant(float(label), [p / g for p, g in zip(result.values[label], genuine)],
                                            tolerance=tolerance)
            for label in arms if label != "0"}


def test_whole_unit_plants_pass_their_check():
    arms = {"0": FakeArm(BATCH)} | {str(level): FakeArm(BATCH + extra_units(level)) for level in LEVELS[1:]}
    checks = _measured_plants(arms)
    assert all(check.ok for check in checks.values()), checks
    assert checks[0.10].measured == pytest.approx(0.10)


def test_a_fixed_cost_seam_is_refused():
    """A broken plant: a seam that costs the same whatever its share (a sleep of a fixed length)."""
    seam_s = 0.1 * BATCH * 0.01  # costs 10 % of a round at every share
    arms = {"0": FakeArm(BATCH)} | {str(level): FakeArm(BATCH, seam_s=seam_s) for level in LEVELS[1:]}
    checks = _measured_plants(arms)
    assert checks[0.10].ok  # at its own size a fixed seam looks right...
    refused = {level: check for level, check in checks.items() if not check.ok}
    assert set(refused) == {0.05, 0.20, 0.40}  # ...and is refused everywhere else
    assert "the plant failed: planting 5% cost +10.0%" in refused[0.05].reason
    level = curve.level_rate(0.05, [True] * 20, refused[0.05])
    assert level.rate is None and not level.reported and level.withheld.startswith("the plant failed")


def test_the_plant_check_is_both_ways_and_decided_by_its_interval():
    assert curve.check_plant(0.10, [1.07] * 10, tolerance=0.3).ok
    too_cheap = curve.check_plant(0.10, [1.069] * 10, tolerance=0.3)
    assert too_cheap.failed and too_cheap.reason.startswith("the plant failed: planting 10% cost +6.9%")
    assert curve.check_plant(0.10, [1.131] * 10, tolerance=0.3).failed  # too dear
    missing = curve.check_plant(0.10, [], tolerance=0.3)
    assert missing.failed and missing.measured is None and "no paired round" in missing.reason
    with pytest.raises(ValueError, match="planted share > 0"):
        curve.check_plant(0.0, [1.0], tolerance=0.3)


def test_a_plant_the_noise_cannot_size_is_unresolved_and_no_claim_rests_on_it():
    noisy = curve.check_plant(0.10, list(np.linspace(1.0, 1.2, 9)), tolerance=0.3)  # median +10 %, interval 2.5-17.5 %
    assert noisy.state == "unresolved" and noisy.measured == pytest.approx(0.10)
    assert (noisy.low, noisy.high) == (pytest.approx(0.025), pytest.approx(0.175))
    assert "its interval reaches past the band" in noisy.reason
    single = curve.check_plant(0.10, [1.10], tolerance=0.3)
    assert single.state == "unresolved" and single.low is None and "1 pairs give no 95 % interval" in single.reason
    wide = curve.check_plant(0.20, list(np.linspace(1.0, 1.4, 9)), tolerance=0.3)
    level = curve.level_rate(0.20, [True] * 80, wide)
    assert wide.state == "unresolved" and level.reported and level.rate == 1.0  # the rate is given...
    exact = curve.check_plant(0.40, [1.4] * 10, tolerance=0.3)
    levels = (curve.level_rate(0.0, [False] * 80, None), level, curve.level_rate(0.40, [True] * 80, exact))
    assert curve.smallest_caught(levels) == 0.40  # ...and no claim rests on it
    saved = PathCurve(path="saved", status="measured", reason="", how="test", levels=levels)
    (gate,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [saved], {})
               if d.metric == "selftest_saved_detection_20pct_rate"]
    assert gate.decision == "inconclusive" and "not shown" in gate.reason


# --------------------------------------------------------------------------------------- statistics


def _levels(flags_per_level: dict) -> tuple[Level, ...]:
    return tuple(curve.level_rate(level, flags, None) for level, flags in flags_per_level.items())


def test_a_share_has_its_clopper_pearson_interval():
    level = curve.level_rate(0.2, [True] * 20, None)
    assert (level.flagged, level.trials, level.rate, level.ci_high) == (20, 20, 1.0, 1.0)
    assert level.ci_low == pytest.approx(0.025 ** (1 / 20))
    none = curve.level_rate(0.2, [], None)
    assert none.rate is None and none.withheld == "no trial ran"


def test_smallest_caught_needs_every_larger_share_caught():
    levels = _levels({0.0: [False] * 20, 0.05: [True] * 5 + [False] * 15, 0.10: [True] * 19 + [False],
                      0.20: [True] * 20, 0.40: [True] * 20})
    assert curve.smallest_caught(levels) == 0.10
    assert curve.smallest_shown(levels) is None  # 20 trials cannot show 95 %
    dip = _levels({0.0: [False] * 20, 0.05: [True] * 20, 0.10: [True] * 10 + [False] * 10, 0.20: [True] * 20,
                   0.40: [True] * 20})
    assert curve.smallest_caught(dip) == 0.20
    many = _levels({0.0: [False] * 80, 0.05: [False] * 80, 0.10: [True] * 80, 0.20: [True] * 80, 0.40: [True] * 80})
    assert curve.smallest_shown(many) == 0.10
    missed = _levels({0.0: [False] * 20, 0.05: [False] * 20, 0.10: [False] * 20, 0.20: [False] * 20,
                      0.40: [True] * 18 + [False] * 2})
    assert curve.smallest_caught(missed) is None


def test_the_false_alarm_reading_says_what_the_interval_shows():
    assert "within 5%" in curve.false_alarm_reading(_levels({0.0: [False] * 20}))
    assert "cannot show it with 20 trials" in curve.false_alarm_reading(_levels({0.0: [False] * 20}))
    assert "the interval shows it" in curve.false_alarm_reading(_levels({0.0: [False] * 80}))
    assert "ABOVE 5%" in curve.false_alarm_reading(_levels({0.0: [True] * 3 + [False] * 17}))


def _curve(path: str, flags_per_level: dict, status: str = "measured") -> PathCurve:
    return curve.finish(PathCurve(path=path, status=status, reason="", how="test", levels=_levels(flags_per_level)))


def test_the_shipped_selftest_gates_are_decided_by_the_interval_on_their_path():
    saved = _curve("saved", {0.0: [False] * 80, 0.05: [False] * 80, 0.10: [True] * 40 + [False] * 40,
                             0.20: [True] * 80, 0.40: [True] * 80})
    gates = _curve("gates", {0.0: [True] * 20, 0.05: [True] * 20, 0.10: [True] * 20, 0.20: [True] * 20,
                             0.40: [True] * 20})
    decisions = {d.metric: d for d in curve.decide_gates(SHIPPED_RATIOS, [saved, gates], {"ab": "not selected"})}
    assert set(decisions) == {"selftest_gates_false_alarm_rate", "selftest_saved_false_alarm_rate",
                              "selftest_saved_detection_20pct_rate", "selftest_ab_false_alarm_rate",
                              "selftest_ab_detection_10pct_rate"}
    assert decisions["selftest_saved_false_alarm_rate"].decision == "pass"  # 0/80: up to 4.5 %
    assert decisions["selftest_saved_detection_20pct_rate"].decision == "pass"  # 80/80: from 95.5 %
    assert decisions["selftest_gates_false_alarm_rate"].decision == "fail"  # 20/20 on unchanged code
    assert decisions["selftest_ab_detection_10pct_rate"].decision == "skipped"
    assert decisions["selftest_ab_detection_10pct_rate"].reason == "not selected"
    few = _curve("saved", {0.0: [False] * 20, 0.20: [True] * 20})
    (inconclusive,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [few], {})
                       if d.metric == "selftest_saved_detection_20pct_rate"]
    assert inconclusive.decision == "inconclusive"  # 20/20: 83-100 % straddles 95 %


def test_a_gate_whose_plant_failed_is_skipped_naming_why():
    failed = curve.check_plant(0.20, [1.5] * 10, tolerance=0.3)
    level = curve.level_rate(0.20, [True] * 20, failed)
    saved = PathCurve(path="saved", status="measured", reason="", how="test",
                      levels=(curve.level_rate(0.0, [False] * 20, None), level))
    (decision,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [saved], {})
                   if d.metric == "selftest_saved_detection_20pct_rate"]
    assert decision.decision == "skipped" and "the plant failed: planting 20% cost +50.0%" in decision.reason
    skipped = PathCurve(path="saved", status="skipped", reason="the budget held 2 runs", how="test")
    (decision,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [skipped], {})
                   if d.metric == "selftest_saved_false_alarm_rate"]
    assert decision.decision == "skipped" and "the budget held 2 runs" in decision.reason


def test_gate_metrics_name_their_path_and_share():
    assert curve.gate_metric("saved", 0.0) == "selftest_saved_false_alarm_rate"
    assert curve.gate_metric("ab", 0.10) == "selftest_ab_detection_10pct_rate"
    assert curve._gate_level("selftest_gates_detection_40pct_rate") == ("gates", 0.40)
    assert curve._gate_level("tf_native_cache_input_wait") is None


# ------------------------------------------------------------------------------------------- options


def _parse(*argv):
    parser = argparse.ArgumentParser(exit_on_error=False)
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_options_parse_into_settings():
    args = _parse("--paths", "saved,gates", "--budget", "60", "--trials", "2", "--profile", "smoke",
                  "--history-runs", "3")
    settings = command.settings_of(args)
    assert settings.paths == ("gates", "saved") and settings.levels == LEVELS
    assert (settings.budget_s, settings.trials, settings.profile, settings.history_runs) == (60.0, 2, "smoke", 3)
    assert (settings.alpha, settings.min_effect) == (command.DEFAULT_ALPHA, command.DEFAULT_MIN_EFFECT)
    defaults = command.settings_of(_parse())
    assert defaults.paths == ("gates", "saved") and defaults.budget_s == command.DEFAULT_BUDGET_S
    assert command.settings_of(_parse("--levels", "0.1,0")).levels == (0.0, 0.1)
    shares = command.budget_shares(defaults)
    assert shares["saved"] == pytest.approx(2 * shares["gates"]) and sum(shares.values()) == pytest.approx(1200)


@pytest.mark.parametrize("argv,message", [
    (["--paths", "gates,nightly"], "expected comma-separated paths among gates,saved,ab"),
    (["--paths", "ab,ab"], "each once"),
    (["--budget", "0"], "seconds > 0"),
    (["--trials", "0"], "integer >= 1"),
    (["--history-runs", "2"], "integer >= 3"),
    (["--alpha", "1.5"], "between 0 and 1"),
    (["--levels", "0.05,0.1"], "including 0"),
    (["--levels", "0,0.03"], "a multiple of 1/20"),
    (["--results", "notes.txt"], "ending in .md"),
    (["--results", "no/such/dir/x.md"], "existing directory"),
])
def test_a_bad_option_is_a_usage_error_before_anything_runs(argv, message, capsys):
    assert main(["selftest", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_default_comparison_settings_are_the_plugin_s(pytestconfig):
    assert (pytestconfig.getoption("perfsuite_compare_runs"), pytestconfig.getoption("perfsuite_compare_alpha"),
            pytestconfig.getoption("perfsuite_compare_min_effect")) == (
        command.DEFAULT_HISTORY_RUNS, command.DEFAULT_ALPHA, command.DEFAULT_MIN_EFFECT)


# ------------------------------------------------------------------------------------------- records


def _report() -> SelftestReport:
    measured = _curve("saved", {level: [False] * 3 for level in LEVELS})
    return SelftestReport(settings=SETTINGS, machine={"cores": 2}, started="now", elapsed_s=1.0,
                          curves=(measured, PathCurve(path="ab", status="skipped", how="", reason="not selected")),
                          gates=(GateDecision(metric="selftest_ab_false_alarm_rate", bound="≤ 0.05",
                                              decision="skipped", reason="not selected"),))


def test_the_report_reads_back_as_written(tmp_path):
    report = _report()
    path = write_report(report, tmp_path / "selftest.json")
    assert json.loads(path.read_text())["schema_version"] == SelftestReport.SCHEMA_VERSION
    assert load_report(path) == report
    assert load_report(path).curve("saved").levels[0].trials == 3


def test_a_version_1_report_reads_its_plant_verdict_as_a_state(tmp_path):
    plant = curve.check_plant(0.20, [1.2] * 10, tolerance=0.3)
    level = curve.level_rate(0.20, [True] * 3, plant)
    report = replace(_report(), curves=(PathCurve(path="saved", status="measured", reason="", how="test",
                                                  levels=(level,)),))
    data = json.loads(write_report(report, tmp_path / "v2.json").read_text())
    old = data["curves"][0]["levels"][0]["plant"]
    for key in ("state", "low", "high"):
        old.pop(key)
    old["ok"] = True
    data["schema_version"] = 1
    (tmp_path / "v1.json").write_text(json.dumps(data))
    read = load_report(tmp_path / "v1.json").curves[0].levels[0].plant
    assert read.ok and read.measured == pytest.approx(0.20) and read.low is None


def test_a_wrong_report_names_the_field(tmp_path):
    data = json.loads(write_report(_report(), tmp_path / "a.json").read_text())
    data["curves"][1]["status"] = "maybe"
    (tmp_path / "a.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match=r"curves\[1\]\.status: expected one of measured, partial, skipped"):
        load_report(tmp_path / "a.json")
    data["schema_version"] = 99
    (tmp_path / "a.json").write_text(json.dumps(data))
    with pytest.raises(RecordError, match="schema_version"):
        load_report(tmp_path / "a.json")


def test_settings_and_curves_refuse_what_they_cannot_mean():
    with pytest.raises(RecordError, match="paths"):
        Settings(paths=("nightly",), levels=LEVELS, trials=1, budget_s=1.0, profile="quick", history_runs=3,
                 alpha=0.01, min_effect=0.1)
    with pytest.raises(RecordError, match="levels"):
        Settings(paths=("saved",), levels=(0.1, 0.05), trials=1, budget_s=1.0, profile="quick", history_runs=3,
                 alpha=0.01, min_effect=0.1)
    with pytest.raises(RecordError, match="why the path was skipped"):
        PathCurve(path="ab", status="skipped", reason="", how="")


def test_the_table_has_a_row_per_share_and_the_markdown_names_every_path():
    from perfsuite.tools.detection.present import curve_table, markdown

    report = _report()
    table = curve_table(report)
    assert [row[0] for row in table.rows] == ["0%", "5%", "10%", "20%", "40%"]
    assert table.rows[0][1] == "0/3 (0%, 0%-71%)"
    text = markdown(report)
    assert "ab: skipped: not selected" in text and "gate selftest_ab_false_alarm_rate" in text
    assert command.exit_status(report) == 0


def test_the_ab_path_keeps_each_run_s_report(tmp_path, monkeypatch):
    from perfsuite.tools.detection import ab_path
    from perfsuite.tools.detection.paths import Context

    def fake_ab(repo, base, head, out, data_dir):
        out.write_text("{}")
        return False, -0.1 if head == "head" else 0.0, ""

    monkeypatch.setattr(ab_path, "planted_clone", lambda root, repo, levels: {0.0: "base", 0.1: "head"})
    monkeypatch.setattr(ab_path, "_run_ab", fake_ab)
    settings = replace(SETTINGS, paths=("ab",), levels=(0.0, 0.1), trials=2)
    context = Context(settings=settings, dataset_dir=tmp_path, ratios=tmp_path, progress=lambda line: None,
                      kept=tmp_path / "ab")
    curve_ = ab_path.ab(context, 10_000.0, root=tmp_path)
    assert sorted(path.name for path in (tmp_path / "ab").iterdir()) == [
        "ab-trial1-0%.json", "ab-trial1-10%.json", "ab-trial2-0%.json", "ab-trial2-10%.json"]
    assert [level.trials for level in curve_.levels] == [2, 2]
