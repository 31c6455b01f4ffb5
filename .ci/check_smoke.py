"""CI's smoke check: every benchmark of a --benchmark-json file produced figures that are measurements.

Not only present: each declared metric (perfsuite.verdict.metrics) in a benchmark's extra_info, and
each of its per-round values, is a finite number in the range its kind can take, read from the
registry: speeds (samples/s, batches/s, audio-s/s) and same-run ratios > 0; utilisation (%) within
[0, 100]; shares shown as percentages within [0, 1], apart from a signed share (the input-bound share
1 - t_synthetic / t_real), which is at most 1 and above -1 (negative only by noise); traces and every
other figure ≥ 0. Every benchmark reports a declared metric, and one measured through the perfsuite
fixture carries its gate verdicts (perfsuite_verdicts), each pass, fail or inconclusive. Every benchmark's
pytest-benchmark stats came through perfsuite's adapter (perfsuite.pytest_plugin.benchmark_adapter): its
extra_info names their unit (stats_unit: s/sample, s/step, s/round, ...) and so does its group, so no table
ranks round times beside times per sample.

Usage: python3 .ci/check_smoke.py RUN.json [RUN.json ...]
"""

from __future__ import annotations

import json
import math
import sys

from perfsuite.pytest_plugin.benchmark_adapter import STATS_UNIT
from perfsuite.verdict import metrics as registry
from perfsuite.verdict.gates import FAIL, INCONCLUSIVE, PASS

SPEED_UNITS = ("samples/s", "batches/s", "audio-s/s")


def allowed_range(metric: registry.Metric) -> tuple[float, float, bool]:
    """(low, high, low exclusive) of a metric's values, from its declaration."""
    if metric.unit in SPEED_UNITS or metric.is_ratio:
        return 0.0, math.inf, True
    if metric.unit == "%":
        return 0.0, 100.0, False
    if metric.percent and metric.signed:  # the input-bound share, 1 - t_synthetic / t_real
        return -1.0, 1.0, True
    if metric.percent:
        return 0.0, 1.0, False
    return 0.0, math.inf, False


def _value_problem(name: str, value, metric: registry.Metric) -> str | None:
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return f"{name}: expected a finite number, found {value!r}"
    low, high, exclusive = allowed_range(metric)
    if value > high or value < low or (exclusive and value == low):
        bracket = "(" if exclusive else "["
        return f"{name}: expected a value in {bracket}{low:g}, {high:g}], found {value!r}"
    return None


def problems(extra_info: dict) -> list[str]:
    """What is wrong with one benchmark's figures; empty when every declared metric is a measurement."""
    found = []
    for key, value in extra_info.items():
        if not registry.is_declared(key) or value is None:
            continue
        metric = registry.lookup(key)
        found.append(_value_problem(key, value, metric))
        rounds = extra_info.get(f"{key}_rounds") or []
        found += [_value_problem(f"{key}_rounds[{i}]", v, metric) for i, v in enumerate(rounds)]
    if "perfsuite_profile" in extra_info:  # measured through the perfsuite fixture: judged by its gates
        verdicts = extra_info.get("perfsuite_verdicts")
        if not isinstance(verdicts, dict):
            found.append("perfsuite_verdicts: expected the gate verdicts, found none")
        else:
            found += [f"perfsuite_verdicts: {v.get('metric')}: expected a decision, found {v.get('decision')!r}"
                      for v in verdicts.get("verdicts", []) if v.get("decision") not in (PASS, FAIL, INCONCLUSIVE)]
    if not any(registry.is_declared(key) and extra_info[key] is not None for key in extra_info):
        found.append("expected at least one declared metric (perfsuite.verdict.metrics), found none")
    return [p for p in found if p]


def stats_problems(run: dict) -> list[str]:
    """What is wrong with the unit of one benchmark's pytest-benchmark stats (empty when it is named)."""
    unit = (run.get("extra_info") or {}).get(STATS_UNIT)
    if not unit:
        return [(f"{STATS_UNIT}: expected the unit of the stats (timed through perfsuite's benchmark_adapter), "
                 "found none")]
    group = run.get("group") or ""
    if group != unit and not group.endswith(f", {unit}"):
        return [f"group: expected it to name the stats' unit {unit!r}, found {group!r}"]
    return []


def main(paths: list[str]) -> int:
    failed = False
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            runs = json.load(stream)["benchmarks"]
        if not runs:
            print(f"smoke ({path}): expected benchmarks, found none")
            failed = True
        for run in runs:
            for problem in problems(run["extra_info"]) + stats_problems(run):
                print(f"smoke ({path}): {run['fullname']}: {problem}")
                failed = True
        print(f"smoke ({path}): {len(runs)} benchmarks checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
