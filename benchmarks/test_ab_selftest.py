"""perfsuite ab's own proof, through real revisions: `perfsuite selftest`'s ab path.

A clone of this repository gets the working tree plus a small planted benchmark as its base commit and one
commit per planted share (perfsuite.tools.detection.ab_path; the plant is exact in whole utterances on
any machine, perfsuite.tools.detection.plant); `perfsuite ab` runs with its defaults on each, as a user
runs it. Every plant is certified in work before its rate is read; the selftest_ab_* gates of
ratios.yaml are decided on this path by the interval of the share. A failed gate fails the test; when
no gate can be decided here (a failed plant, a budget too small) the test skips naming why.

On demand only (marker selftest and slow; each ab run takes a minute or two): ``pytest
benchmarks/test_ab_selftest.py -m "selftest and slow" -s -p no:randomly``, or the command itself:
``perfsuite selftest --paths ab``. Size: PERFSUITE_AB_SELFTEST_TRIALS (default 5) and _BUDGET (seconds
for the whole path).
"""

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.selftest, pytest.mark.slow]


def test_ab_detection_curve_decides_the_ab_gates(pytestconfig, capsys):
    from perfsuite.tools.detection import command
    from perfsuite.tools.detection.ab_path import cost_line
    from perfsuite.tools.detection.present import curve_table, summary_lines
    from perfsuite.tools.detection.records import LEVELS, Settings

    trials = int(os.environ.get("PERFSUITE_AB_SELFTEST_TRIALS", "5"))
    budget = float(os.environ.get("PERFSUITE_AB_SELFTEST_BUDGET", "21600"))
    baselines = pytestconfig.getoption("perfsuite_baselines") or Path(__file__).parent / "baselines"
    settings = Settings(paths=("ab",), levels=LEVELS, trials=trials, budget_s=budget, profile="quick",
                        history_runs=command.DEFAULT_HISTORY_RUNS, alpha=command.DEFAULT_ALPHA,
                        min_effect=command.DEFAULT_MIN_EFFECT)
    with capsys.disabled():
        print(f"\n{cost_line(LEVELS, trials)}")
        report = command.measure(settings, ratios=Path(baselines) / "ratios.yaml",
                                 data_dir=pytestconfig.getoption("perfsuite_data_dir"),
                                 progress=lambda line: print(f"ab selftest: {line}", flush=True))
        print("\n".join(curve_table(report).terminal() + summary_lines(report)))
    gates = [gate for gate in report.gates if gate.metric.startswith("selftest_ab_")]
    failed = [gate for gate in gates if gate.decision == "fail"]
    assert not failed, "; ".join(f"{g.metric} {g.bound}: {g.rate:.0%} [{g.ci_low:.0%}, {g.ci_high:.0%}]" for g in failed)
    if all(gate.decision == "skipped" for gate in gates):
        pytest.skip("no selftest_ab_* gate could be decided here: " + "; ".join(f"{g.metric}: {g.reason}" for g in gates))
