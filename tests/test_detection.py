"""perfsuite selftest's pieces on synthetic numbers: the plant certified in work (a broken plant refused), the
shares and their intervals, the smallest slowdown caught, the gates decided by the interval, option
parsing, and the records read back. No TensorFlow pipeline, no timing."""

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

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
SETTINGS = Settings(paths=("work", "saved"), levels=LEVELS, trials=20, budget_s=1200.0, profile="quick",
                    history_runs=10, alpha=0.01, min_effect=0.10)


# ----------------------------------------------------------------------------------------- the plant


def test_every_planted_share_is_a_whole_number_of_utterances():
    assert [extra_units(level) for level in LEVELS] == [0, 1, 2, 4, 8]
    assert BATCH == 20
    with pytest.raises(ValueError, match="whole number of utterances"):
        extra_units(0.03)
    with pytest.raises(ValueError, match="planted share"):
        extra_units(-0.1)


def test_a_plant_is_certified_by_its_work_and_its_time_cost_is_only_reported():
    exact = curve.certify_plant(0.10, 0.10, [1.02, 1.30, 1.07] * 4)  # time read anywhere: reported, no band
    assert exact.ok and exact.work == pytest.approx(0.10) and exact.measured == pytest.approx(0.07)
    assert exact.low is not None and exact.pairs == 12
    off = curve.certify_plant(0.10, 0.09, [1.10] * 10)  # time says 10 %, the work says 9 %: refused
    assert off.failed and off.reason.startswith("the plant failed: planting 10% added +9.00% float ops")
    unread = curve.certify_plant(0.10, None, [1.10] * 10)
    assert unread.failed and "no work fingerprint" in unread.reason
    untimed = curve.certify_plant(0.05, 0.05, [])
    assert untimed.ok and untimed.measured is None and untimed.pairs == 0
    with pytest.raises(ValueError, match="planted share > 0"):
        curve.certify_plant(0.0, 0.0, [1.0])
    level = curve.level_rate(0.10, [True] * 20, off)
    assert level.rate is None and not level.reported and level.withheld.startswith("the plant failed")


def test_a_failed_plant_supports_no_claim():
    failed = curve.certify_plant(0.20, 0.15, [1.2] * 9)
    level = curve.level_rate(0.20, [True] * 80, failed)
    exact = curve.certify_plant(0.40, 0.40, [1.4] * 10)
    levels = (curve.level_rate(0.0, [False] * 80, None), level, curve.level_rate(0.40, [True] * 80, exact))
    assert curve.smallest_caught(levels) == 0.40
    saved = PathCurve(path="saved", status="measured", reason="", how="test", levels=levels)
    (gate,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [saved], {})
               if d.metric == "selftest_saved_detection_20pct_rate"]
    assert gate.decision == "skipped" and "plant failed" in gate.reason


def test_the_saved_path_says_the_smallest_slowdown_its_runs_can_flag():
    from perfsuite.tools.detection.paths import smallest_flaggable

    quiet = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.0]
    assert smallest_flaggable(quiet, SETTINGS) == pytest.approx(1 / 0.9 - 1)  # the minimum effect rules
    noisy = list(np.exp(np.random.default_rng(3).normal(0, 0.13, 10)) * 100)
    floor = smallest_flaggable(noisy, SETTINGS)
    sd = float(np.std(np.log(noisy), ddof=1))
    assert floor == pytest.approx(np.expm1(2.821 * sd * np.sqrt(1.1)), rel=1e-3) and floor > 0.40


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
    ab = _curve("ab", {0.0: [True] * 20, 0.10: [True] * 20})
    decisions = {d.metric: d for d in curve.decide_gates(SHIPPED_RATIOS, [saved, ab], {})}
    assert set(decisions) == {"selftest_saved_false_alarm_rate", "selftest_saved_detection_20pct_rate",
                              "selftest_ab_false_alarm_rate", "selftest_ab_detection_10pct_rate"}
    assert decisions["selftest_saved_false_alarm_rate"].decision == "pass"  # 0/80: up to 4.5 %
    assert decisions["selftest_saved_detection_20pct_rate"].decision == "pass"  # 80/80: from 95.5 %
    assert decisions["selftest_ab_false_alarm_rate"].decision == "fail"  # 20/20 on unchanged code
    decisions = {d.metric: d for d in curve.decide_gates(SHIPPED_RATIOS, [saved], {"ab": "not selected"})}
    assert decisions["selftest_ab_detection_10pct_rate"].decision == "skipped"
    assert decisions["selftest_ab_detection_10pct_rate"].reason == "not selected"
    few = _curve("saved", {0.0: [False] * 20, 0.20: [True] * 20})
    (inconclusive,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [few], {})
                       if d.metric == "selftest_saved_detection_20pct_rate"]
    assert inconclusive.decision == "inconclusive"  # 20/20: 83-100 % straddles 95 %


def test_a_skipped_path_skips_its_gates_naming_why():
    skipped = PathCurve(path="saved", status="skipped", reason="the budget held 2 runs", how="test")
    (decision,) = [d for d in curve.decide_gates(SHIPPED_RATIOS, [skipped], {})
                   if d.metric == "selftest_saved_false_alarm_rate"]
    assert decision.decision == "skipped" and "the budget held 2 runs" in decision.reason


def test_gate_metrics_name_their_path_and_share():
    assert curve.gate_metric("saved", 0.0) == "selftest_saved_false_alarm_rate"
    assert curve.gate_metric("ab", 0.10) == "selftest_ab_detection_10pct_rate"
    assert curve._gate_level("selftest_work_detection_40pct_rate") == ("work", 0.40)
    assert curve._gate_level("tf_native_cache_input_wait") is None


# ------------------------------------------------------------------------------------------- options


def _parse(*argv):
    parser = argparse.ArgumentParser(exit_on_error=False)
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_options_parse_into_settings():
    args = _parse("--paths", "saved,work", "--budget", "60", "--trials", "2", "--profile", "smoke",
                  "--history-runs", "3")
    settings = command.settings_of(args)
    assert settings.paths == ("work", "saved") and settings.levels == LEVELS
    assert (settings.budget_s, settings.trials, settings.profile, settings.history_runs) == (60.0, 2, "smoke", 3)
    assert (settings.alpha, settings.min_effect) == (command.DEFAULT_ALPHA, command.DEFAULT_MIN_EFFECT)
    defaults = command.settings_of(_parse())
    assert defaults.paths == ("work", "saved") and defaults.budget_s == pytest.approx(120 + 1200)
    assert command.settings_of(_parse("--paths", "ab")).budget_s == pytest.approx(3600)  # ab's own default
    assert command.settings_of(_parse("--levels", "0.1,0")).levels == (0.0, 0.1)
    shares = command.budget_shares(defaults)
    assert shares["saved"] == pytest.approx(10 * shares["work"]) and sum(shares.values()) == pytest.approx(1320)


def test_the_ab_path_runs_every_trial_at_0_and_10_percent_and_two_elsewhere():
    from perfsuite.tools.detection.ab_path import cost_line, flagged, trials_at

    assert [trials_at(level, 20) for level in LEVELS] == [20, 2, 20, 2, 2]
    assert [trials_at(level, 2) for level in LEVELS] == [2, 2, 2, 2, 2]
    assert "46 runs of `perfsuite ab`" in cost_line(LEVELS, 20) and "about 58 min" in cost_line(LEVELS, 20)
    assert flagged(0.0, "faster") and flagged(0.0, "slower (CPU per sample +3.0% [+1.0%, +5.0%])")
    assert not flagged(0.0, "undecided (over 32 passes; more passes or a longer --budget would narrow it)")
    assert flagged(0.10, "slower") and not flagged(0.10, "faster") and not flagged(0.10, "no change")


@pytest.mark.parametrize("argv,message", [
    (["--paths", "gates,nightly"], "expected comma-separated paths among work,saved,ab"),
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


def test_a_version_2_report_reads_without_its_gates_path(tmp_path):
    data = json.loads(write_report(_report(), tmp_path / "v3.json").read_text())
    data["schema_version"] = 2
    data["settings"] |= {"paths": ["gates", "saved"], "tolerance": 0.3}
    data["curves"].insert(0, {**data["curves"][0], "path": "gates"})
    data["gates"].append({"metric": "selftest_gates_false_alarm_rate", "bound": "≤ 0.05", "decision": "skipped"})
    (tmp_path / "v2.json").write_text(json.dumps(data))
    read = load_report(tmp_path / "v2.json")
    assert read.settings.paths == ("saved",) and [c.path for c in read.curves] == ["saved", "ab"]
    assert [g.metric for g in read.gates] == ["selftest_ab_false_alarm_rate"]


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
        return ("slower", -0.1, "") if head == "head" else ("undecided (over 24 passes)", 0.0, "")

    monkeypatch.setattr(ab_path, "planted_clone", lambda root, repo, levels: {"base": "b", 0.0: "aa", 0.1: "head"})
    monkeypatch.setattr(ab_path, "_run_ab", fake_ab)
    settings = replace(SETTINGS, paths=("ab",), levels=(0.0, 0.1), trials=2)
    context = Context(settings=settings, dataset_dir=tmp_path, ratios=tmp_path, progress=lambda line: None,
                      kept=tmp_path / "ab", work=({0.1: 0.1}, {}))
    curve_ = ab_path.ab(context, 10_000.0, root=tmp_path)
    assert sorted(path.name for path in (tmp_path / "ab").iterdir()) == [
        "ab-trial1-0%.json", "ab-trial1-10%.json", "ab-trial2-0%.json", "ab-trial2-10%.json"]
    assert [level.trials for level in curve_.levels] == [2, 2]
    assert [level.flagged for level in curve_.levels] == [0, 2]  # undecided is no false alarm
    assert curve_.levels[0].verdicts == ("undecided (over 24 passes)",) * 2 and curve_.levels[1].plant.ok
