"""`perfsuite diagnose`: the time budget (split, early stopping, the minimum), intervals on every figure,
checkpoints an interrupted run keeps, the JSON schema and its round trip, plots, verdicts that follow
the figures, bad files counted, exit codes.

The full diagnosis runs once per module through the CLI (tiny corpus with two bad WAVs added, tiny
model, few batches, a small budget; 24 usable utterances are fewer than one round at batch 8 x 4
batches, so it also runs on a repeated view). The budget machinery is tested with fake clocks, the
verdict rules on hand-made figures, and the checkpoints by interrupting a run after its first stage.
"""

import copy
import json
import re
import shutil
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from perfsuite.errors import PerfsuiteError
from perfsuite.measure.rounds import BUDGET_SPENT, until_decided
from perfsuite.measure.stats import classify_input_bound
from perfsuite.records import RecordError, versioned
from perfsuite.tools import cli
from perfsuite.tools.diagnose import run as diagnose_module
from perfsuite.tools.diagnose.plan import Event, split_budget, status_of
from perfsuite.tools.diagnose.preset import preset_target
from perfsuite.tools.diagnose.run import STAGE_NEEDS
from perfsuite.tools.diagnose.stages import feed_figures, keeps_busy, sweep_figures, sweep_points
from perfsuite.tools.diagnose.views import repeat_copies, write_repeated_view
from perfsuite.verdict.diagnosis import (
    feed_verdict,
    gpu_verdicts,
    input_bound_finding,
    stage_verdicts,
    sweep_verdicts,
    variation_finding,
)
from perfsuite.verdict.diagnosis_figures import (
    ALTERNATIVE_LOADERS,
    ALTERNATIVE_MODES,
    DECIDED,
    INPUT_BOUND_BOUNDARIES,
    INTERRUPTED,
    MAX_ROUNDS,
    MIN_ROUNDS,
    TOO_SHORT,
    UNDECIDED,
    DiagnoseSettings,
    FeedFigures,
    GpuFigures,
    InputBoundFigures,
    RoundsEstimate,
    StageRecord,
    estimate,
)
from perfsuite.verdict.diagnosis_record import SCHEMA_VERSION, Diagnosis
from perfsuite.verdict.pipeline_findings import verdicts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wav"
BAD = ("pcm24", "not_a_wav")
STAGES = ["throughput", "input_bound", "bottleneck", "capacity", "fixes", "feed", "sweep", "trace"]
ALTERNATIVES = {*(f"loader {kind}-{source}" for kind, source in ALTERNATIVE_LOADERS),
                *(f"step {mode}" for mode in ALTERNATIVE_MODES)}
BUDGET_S = 90  # the stages' shares must hold a few rounds each on the slower CPUs under -n


@pytest.fixture(scope="module")
def dataset_with_bad_files(tiny_corpus, tmp_path_factory):
    """A copy of the tiny corpus plus two unreadable WAVs listed in its metadata."""
    root = tmp_path_factory.mktemp("diagnose") / "data"
    shutil.copytree(tiny_corpus, root, ignore=shutil.ignore_patterns("cache"))  # diagnose builds its own
    with (root / "metadata.csv").open("a", encoding="utf-8") as metadata:
        for name in BAD:
            shutil.copy(FIXTURES / f"{name}.wav", root / "wavs" / f"{name}.wav")
            metadata.write(f"{name}|A tone.|A tone.\n")
    return root


class Run(NamedTuple):
    code: int
    out: str
    err: str
    result: dict  # the --json file, as loaded
    out_dir: Path
    diagnosis: Diagnosis  # the object diagnose() returned to the CLI
    checkpoints: list  # (complete, stage names) of every checkpoint the CLI wrote


@pytest.fixture(scope="module")
def run(dataset_with_bad_files, tmp_path_factory) -> Run:
    """One diagnose run through the CLI."""
    import io

    out_dir = tmp_path_factory.mktemp("diagnose-out")
    returned, checkpoints = [], []

    def diagnose_and_keep(**kwargs):
        write = kwargs["checkpoint"]

        def checkpoint(diagnosis):
            checkpoints.append((diagnosis.complete, [stage.name for stage in diagnosis.stages]))
            write(diagnosis)

        returned.append(original(**{**kwargs, "checkpoint": checkpoint}))
        return returned[-1]

    original = diagnose_module.diagnose
    stdout, stderr = io.StringIO(), io.StringIO()
    patch = pytest.MonkeyPatch()
    patch.setattr(diagnose_module, "diagnose", diagnose_and_keep)
    patch.setattr(sys, "stdout", stdout)
    patch.setattr(sys, "stderr", stderr)
    try:
        code = cli.main(["diagnose", str(dataset_with_bad_files), "--model", "tiny", "--batches", "4",
                         "--budget", str(BUDGET_S), "--batch-size", "4", "--json", str(out_dir / "result.json"),
                         "--report", str(out_dir / "report"), "--trace", str(out_dir / "trace")])
    finally:
        patch.undo()
    result = json.loads((out_dir / "result.json").read_text())
    return Run(code, stdout.getvalue(), stderr.getvalue(), result, out_dir, returned[0], checkpoints)


def _estimates(data, path="") -> list[tuple[str, dict]]:
    """Every RoundsEstimate record in a JSON tree, with where it sits."""
    found = []
    if isinstance(data, dict):
        if {"median", "low", "high", "coverage", "rounds", "straddles"} <= set(data):
            found.append((path, data))
        for key, value in data.items():
            found += _estimates(value, f"{path}.{key}")
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += _estimates(value, f"{path}[{i}]")
    return found


# ------------------------------------------------------------------------------------ the budget


def test_the_budget_is_split_in_proportion_to_what_each_stage_needs():
    plan = split_budget(180.0, STAGE_NEEDS)
    assert list(plan) == list(STAGE_NEEDS) and sum(plan.values()) == pytest.approx(180.0)
    assert plan["input_bound"] / plan["feed"] == pytest.approx(STAGE_NEEDS["input_bound"] / STAGE_NEEDS["feed"])
    assert split_budget(60.0, {"a": 1.0, "b": 2.0}) == {"a": 20.0, "b": 40.0}
    assert split_budget(-5.0, {"a": 1.0, "b": 3.0}) == {"a": 0.0, "b": 0.0}  # nothing left: nothing to share
    assert split_budget(10.0, {}) == {}
    with pytest.raises(ValueError, match=r"needs\['b'\]: expected a weight > 0, found 0"):
        split_budget(10.0, {"a": 1.0, "b": 0})


def test_calls_per_round_follow_the_measured_step_time():
    from perfsuite.tools.diagnose.input_bound import side_steps

    assert side_steps(60.0, 0.5, warmup=1) == 9  # 6 rounds of 2 sides x 10 calls of 0.5 s fill 60 s
    assert side_steps(60.0, 0.0001, warmup=1) == 63  # a fast step: at most 64 calls a side
    assert side_steps(3.0, 2.0, warmup=1) == 3  # a slow step: the fewest timed steps


class FakeClock:
    """A clock that only moves when a round says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


STAGE_ROUNDS = {"max_rounds": MAX_ROUNDS, "min_rounds": MIN_ROUNDS}  # as a diagnose stage runs them


def test_a_stage_stops_once_decided_with_share_left():
    clock, rounds = FakeClock(), []

    def one_round(index):
        clock.now += 2.0
        rounds.append(index)

    outcome = until_decided(one_round, decided=lambda: True, **STAGE_ROUNDS, limit_s=100.0, clock=clock)
    assert outcome.rounds == MIN_ROUNDS and outcome.decided and status_of(outcome) == DECIDED
    assert clock.now == 2.0 * MIN_ROUNDS  # decided after the minimum: 94 s of the share left unspent


def test_a_stage_stops_before_a_round_that_would_overrun_its_share():
    clock = FakeClock()

    def one_round(index):
        clock.now += 10.0

    outcome = until_decided(one_round, decided=lambda: False, **STAGE_ROUNDS, limit_s=45.0, clock=clock)
    assert outcome.rounds == 4 and outcome.stopped == BUDGET_SPENT and status_of(outcome) == UNDECIDED
    assert clock.now == 40.0 and outcome.round_s == 10.0  # a fifth round would end at 50 s


def test_a_share_below_the_minimum_rounds_is_not_enough_time_to_decide():
    clock = FakeClock()

    def one_round(index):
        clock.now += 10.0

    short = until_decided(one_round, decided=lambda: True, **STAGE_ROUNDS, limit_s=25.0, clock=clock)
    assert short.rounds == 2 and status_of(short) == TOO_SHORT == "not enough time to decide"
    nothing = until_decided(one_round, decided=lambda: True, **STAGE_ROUNDS, limit_s=25.0, clock=clock, first_estimate_s=30.0)
    assert nothing.rounds == 0 and status_of(nothing) == TOO_SHORT  # the estimate says no round fits: none runs
    spent = until_decided(one_round, decided=lambda: True, **STAGE_ROUNDS, limit_s=0.0, clock=clock)
    assert spent.rounds == 0  # no share left: not even a first round to learn what one costs


def test_warm_up_rounds_run_first_and_do_not_count():
    clock, seen = FakeClock(), []

    def one_round(index):
        clock.now += 5.0 if index == 0 else 1.0  # a slow warm-up round (start-up)
        seen.append(index)

    outcome = until_decided(one_round, decided=lambda: True, **STAGE_ROUNDS, limit_s=100.0, clock=clock, warmup_rounds=1,
                         on_round=lambda rounds, spent: seen.append(("after", rounds)))
    assert outcome.rounds == MIN_ROUNDS and seen[:2] == [0, ("after", 0)]
    assert outcome.round_s == 1.0  # the measured rounds, not the warm-up, estimate the next one


def test_a_second_pass_keeps_back_what_followed_its_rounds_and_ends_within_the_budget():
    from perfsuite.tools.diagnose.plan import Budget, Resumable, StageLog, no_progress

    clock, teardown_s = FakeClock(), 8.0

    def run(stage):  # rounds of 2 s until the share is spent, then closing its iterators takes teardown_s
        def one_round(index):
            clock.now += 2.0

        stage.rounds_until_decided(one_round, decided=lambda: False)
        clock.now += teardown_s
        stage.status = UNDECIDED
        return {}

    budget = Budget(60.0, {"slow": 1.0}, clock)
    log = StageLog(make=lambda **found: found, parts={}, budget=budget, progress=no_progress, checkpoint=None)
    with log.stage("slow") as stage:
        run(stage)
    assert clock.now > 60.0 - 2.0 * teardown_s and log.tails == {"slow": teardown_s}  # the first pass overran
    budget.total_s = clock.now + 30.0  # 30 s left for a second pass
    log.resume({"slow": Resumable(run, lambda: 10.0)})
    assert budget.left_s() >= 0.0  # its rounds stopped teardown_s early: the pass ended within the budget


def test_an_estimate_carries_its_interval_rounds_and_the_boundaries_it_straddles():
    from perfsuite.measure import stats

    assert INPUT_BOUND_BOUNDARIES == (stats.MODERATELY_INPUT_BOUND, stats.HIGHLY_INPUT_BOUND)
    clear = estimate([0.01, 0.02, 0.03, 0.02], INPUT_BOUND_BOUNDARIES)
    assert (clear.low, clear.high, clear.rounds, clear.straddles) == (0.01, 0.03, 4, ())
    assert clear.decided and clear.coverage == stats.median_interval([0.01, 0.02, 0.03, 0.02]).coverage
    straddling = estimate([0.03, 0.12, 0.25], INPUT_BOUND_BOUNDARIES)
    assert straddling.straddles == (0.05, 0.20) and not straddling.decided
    assert not estimate([0.01, 0.02], INPUT_BOUND_BOUNDARIES).decided  # clear of the boundaries, too few rounds


# ------------------------------------------------------------------------------- the full run


def test_bad_files_are_listed_counted_and_the_rest_measured(run, tiny_corpus):
    assert run.code == 1  # data problems found, measured on the rest
    listed = [line.split(": expected ")[0] for line in run.out.splitlines() if line.startswith(str(Path("/")))
              and ": expected " in line]
    assert sorted(Path(p).stem for p in listed) == sorted(BAD)
    good = len((tiny_corpus / "metadata.csv").read_text().splitlines())
    assert run.result["data"]["skipped"] == 2
    assert run.result["data"]["checked"] == good + 2
    assert run.result["data"]["usable"] == good
    assert "Traceback" not in run.out


def test_a_dataset_smaller_than_a_round_is_measured_repeated_and_says_so(run, tiny_corpus):
    good = len((tiny_corpus / "metadata.csv").read_text().splitlines())
    # 24 utterances < 8 (largest batch) x 4 batches: listed twice, 48 = a multiple of 2, 4 and 8
    assert run.result["data"]["repeat"] == {"copies": 2, "utterances_measured": 2 * good, "round_samples": 32}
    assert "[data-size] only 24 usable utterance(s)" in run.out


def test_the_run_keeps_to_its_budget_and_records_every_stage(run):
    result = run.result
    assert result["complete"] is True
    assert [stage["name"] for stage in result["stages"]] == STAGES
    # The start-up (the step's first calls) and the alternatives' first calls, then one round past an estimate.
    assert result["elapsed_s"] <= BUDGET_S + 30
    for stage in result["stages"]:
        assert stage["status"] in (DECIDED, UNDECIDED, TOO_SHORT, "done") and stage["plan"]
        if stage["status"] == DECIDED and stage["name"] not in ("fixes", "feed"):
            assert stage["rounds"] >= MIN_ROUNDS
    # A checkpoint after the start-up and after every stage's pass, each holding the stages so far, then the
    # complete one.
    assert run.checkpoints[0] == (False, []) and run.checkpoints[-1] == (True, STAGES)
    for complete, names in run.checkpoints[1:-1]:
        assert not complete and names == STAGES[:len(names)]


def test_the_preset_measures_its_loader_and_ranks_the_other_loaders_and_step_modes_as_changes(run):
    diagnosis = run.diagnosis
    assert diagnosis.target == preset_target(Path(diagnosis.target.dataset), diagnosis.settings)
    assert diagnosis.throughput.rate.median > 0 and diagnosis.throughput.unit == "samples"
    assert diagnosis.step.first_s > 0 and diagnosis.step.retraces == 0  # static shapes: one trace
    fixes = {fix.name: fix for fix in diagnosis.fixes}
    measured = [fix for fix in fixes.values() if fix.applied and fix.gain is not None]
    assert measured and {fix.name for fix in measured} <= set(fixes)
    assert ALTERNATIVES & set(fixes), "the fixes stage had time for no alternative"
    for name in ALTERNATIVES & set(fixes):
        unit = fixes[name].unit
        assert unit is None or unit.startswith("steps/s" if name.startswith("step") else "samples/s")
    changes = [v for v in diagnosis.verdicts if v.topic.startswith("fix-") and v.interval is not None]
    assert tuple(changes) == diagnosis.verdicts[:len(changes)]  # what to change first opens the findings ...
    out = run.out.splitlines()
    checked = next(i for i, line in enumerate(out) if line.startswith("checked "))
    assert out[checked + 1].startswith("what to change first: ")  # ... and the output, after check-data


def test_the_pipeline_gets_a_feed_rate_and_a_judgement_its_interval_supports(run):
    figures = run.result["feed"]
    if figures is None:
        assert next(s for s in run.result["stages"] if s["name"] == "feed")["status"] == TOO_SHORT
        return
    feed, step_s = figures["feed"], figures["step_s"]
    assert figures["step_time"] == DiagnoseSettings().step_time and step_s > 0
    if figures["keeps_busy"] is True:
        assert step_s >= feed["step_high_s"]
    elif figures["keeps_busy"] is False:
        assert feed["step_s"] is None or step_s <= feed["step_low_s"]


def test_every_figure_carries_its_interval_and_rounds_and_decided_stages_decided_them(run):
    result = run.result
    found = _estimates(result)
    assert found
    for where, figure in found:
        assert figure["low"] <= figure["median"] <= figure["high"], where
        assert figure["rounds"] >= 1 and 0 <= figure["coverage"] <= 1, where
        assert figure["straddles"] == [b for b in figure["boundaries"] if figure["low"] < b <= figure["high"]], where
    stages = {stage["name"]: stage for stage in result["stages"]}
    if stages["input_bound"]["status"] == DECIDED:
        assert RoundsEstimate.from_dict(result["input_bound"]["share"]).decided


def test_every_verdict_on_a_measured_figure_carries_its_interval(run):
    measured = ("throughput", "input-bound", "workers", "batch_size")
    for verdict in run.diagnosis.verdicts:
        if verdict.topic.startswith(measured) or (verdict.topic.startswith("fix-") and verdict.evidence["applied"]
                                                  and "gain" in verdict.evidence):
            assert verdict.interval is not None, verdict.topic
            figure = verdict.interval
            if figure.rounds < MIN_ROUNDS:
                assert TOO_SHORT in verdict.finding and verdict.recommendation is None
            elif figure.straddles and not verdict.topic.startswith("fix-"):
                assert "straddles" in verdict.finding and verdict.recommendation is None
    printed = [line for line in run.out.splitlines() if line.startswith("    interval: ")]
    assert len(printed) == sum(v.interval is not None for v in run.diagnosis.verdicts)


def test_json_holds_every_figure_settings_and_fingerprint(run):
    from perfsuite.measure.machine import machine_fingerprint

    result = run.result
    assert result["schema_version"] == SCHEMA_VERSION == 9 and "kind" not in result
    assert result["settings"]["batch_size"] == 4 and result["settings"]["model"] == "tiny"
    assert result["settings"]["batches"] == 4 and result["settings"]["budget_s"] == BUDGET_S
    assert set(result["fingerprint"]) == set(machine_fingerprint().as_dict())
    throughput = result["throughput"]
    assert len(throughput["batch_s"]) == sum(throughput["round_batches"]) and throughput["rate"]["median"] > 0
    bound = result["input_bound"]
    assert bound["t_real"] > 0 and bound["t_synthetic"] > 0 and bound["batches"] >= 2
    assert len(bound["real_round_s"]) == len(bound["synthetic_round_s"]) == bound["share"]["rounds"]
    assert bound["wait"]["rounds"] == bound["share"]["rounds"]  # the wait share, from the same rounds
    assert 0 <= bound["wait"]["low"] <= bound["wait"]["median"] <= bound["wait"]["high"] <= 1
    sweeps = {sweep["axis"]: sweep for sweep in result["sweep"]}
    for axis, points, current in (("workers", [1, 2, 4], 2), ("batch_size", [2, 4, 8], 4)):
        if axis not in sweeps:
            continue  # no round fit its share
        sweep = sweeps[axis]
        assert [row["point"] for row in sweep["points"]] == points and sweep["current"] == current
        assert sweep["order"][0] == points[::-1]  # the warm-up round ran forwards, the first measured one backwards
        for row in sweep["points"]:
            assert row["current"] == (row["point"] == current)
            assert row["samples_per_s_low"] <= row["samples_per_s"] <= row["samples_per_s_high"]
            assert len(row["samples_per_s_rounds"]) == sweep["rounds"] == row["interval"]["rounds"]
            assert (row["vs_current"] is None) == (row["ratio"] is None) == row["current"]
    if "batch_size" in sweeps:  # about equal samples a round
        assert {row["point"]: row["batches"] for row in sweeps["batch_size"]["points"]} == {2: 8, 4: 4, 8: 2}
    assert result["gpu"]["available"] in (True, False)
    if not result["gpu"]["available"]:
        assert result["gpu"]["reason"]
    assert result["cache"]["temporary"] is True  # the corpus copy has no cache: one was built
    trace_stage = result["stages"][-1]
    assert (result["trace"] is not None) == (trace_stage["status"] == "done")
    if result["trace"] is not None:
        assert any((run.out_dir / "trace").rglob("*.xplane.pb"))


def test_json_round_trips_through_diagnosis_from_dict(run):
    returned = run.diagnosis
    assert Diagnosis.from_dict(versioned(returned)) == returned
    assert json.loads(json.dumps(returned.as_dict())) == {k: v for k, v in run.result.items() if k != "schema_version"}
    loaded = Diagnosis.from_dict(run.result)
    assert loaded == returned
    assert verdicts(loaded) == list(loaded.verdicts)  # the stored verdicts follow from the stored figures
    assert [p.name for p in run.out_dir.iterdir() if p.name.endswith(".tmp")] == []  # written atomically
    assert stat.S_IMODE((run.out_dir / "result.json").stat().st_mode) == 0o644


@pytest.mark.parametrize("damage, message", [
    (lambda d: d.update(schema_version=3), "schema_version: expected one of [4, 5, 6, 7, 8, 9], found 3"),
    (lambda d: d.pop("schema_version"), "schema_version: expected an integer (current: 9), found None"),
    (lambda d: d.update(kind="dataset"), ("kind: expected one of the keys target, settings, fingerprint, complete, "
     "elapsed_s, stages, verdicts, graph, layout, startup_s, throughput, step, input_bound, bottleneck, capacity, "
     "fixes, feed, work, data, cache, static_shapes, sweep, gpu, trace, found an unknown key")),
    (lambda d: d.pop("complete"), "complete: expected a value (required key), found no such key"),
    (lambda d: d["throughput"].pop("rate"), "throughput.rate: expected a value (required key), found no such key"),
    (lambda d: d["input_bound"]["share"].pop("rounds"),
     "input_bound.share.rounds: expected a value (required key), found no such key"),
    (lambda d: d["stages"][0].pop("status"), "stages[0].status: expected a value (required key), found no such key"),
    (lambda d: d.update(verdicts={}), "verdicts: expected a list (tuple), found dict {}"),
    (lambda d: d["stages"][0].update(rounds="3"), "stages[0].rounds: expected int, found str '3'"),
], ids=["old-version", "no-version", "a-kind", "no-complete", "throughput-rate", "share-rounds",
        "stage-status", "verdicts-type", "rounds-type"])
def test_a_wrong_schema_version_or_missing_key_is_refused_by_name(run, damage, message):
    result = copy.deepcopy(run.result)
    damage(result)
    with pytest.raises(RecordError) as raised:
        Diagnosis.from_dict(result)
    assert str(raised.value) == f"diagnosis: {message}"
    assert isinstance(raised.value, PerfsuiteError)


def test_printed_verdicts_are_the_json_verdicts_with_evidence(run):
    assert run.result["verdicts"]
    for verdict in run.result["verdicts"]:
        assert f"[{verdict['topic']}] {verdict['finding']}" in run.out
        assert verdict["evidence"] or verdict["topic"] == "input-bound"
    assert "perfsuite diagnose [startup] checking the data" in run.err  # progress on stderr
    assert f"perfsuite diagnose [plan] budget {BUDGET_S} s" in run.err
    assert "perfsuite diagnose [input_bound] rounds of " in run.err and "s of its share, " in run.err
    assert "s of the budget left" in run.err
    assert f"of the {BUDGET_S} s budget" in run.out.splitlines()[-3]  # the stages line, before json: and report:


def test_report_has_non_empty_pngs_linked_from_the_summary(run):
    report = run.out_dir / "report"
    pngs = sorted(report.glob("*.png"))
    assert {p.name for p in pngs} >= {"batch_timeline.png"}
    summary = (report / "summary.md").read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert f"]({png.name})" in summary
    assert "| stage | status | share s |" in re.sub(r" +", " ", summary)  # Markdown tables pad their cells
    assert "**Incomplete**" not in summary and "## What to change first" in summary


def test_summary_notes_drift_of_the_same_setting_measured_three_times(run):
    from perfsuite.tools.report import markdown_summary

    result = copy.deepcopy(run.result)
    same = result["throughput"]["rate"]["median"]
    result["sweep"] = [sweep_figures(axis=axis, current=current, values={1: [same] * 3, current: [same] * 3}).as_dict()
                       for axis, current in (("workers", 2), ("batch_size", 4))]  # whether or not they had time here
    current = {sweep["axis"]: next(row for row in sweep["points"] if row["current"]) for sweep in result["sweep"]}
    for row in current.values():
        row["samples_per_s"] = same
    assert "measured 3 times" not in markdown_summary(Diagnosis.from_dict(result), [])
    current["batch_size"]["samples_per_s"] = 2 * same
    assert f"{2 * same:.0f} samples/s in the batch-size sweep" in markdown_summary(Diagnosis.from_dict(result), [])


# --------------------------------------------------------------------- interrupted: nothing lost


def _interrupt_after(stage_name):
    def progress(event: Event) -> None:
        if event.stage == stage_name and event.kind == "end":
            raise KeyboardInterrupt

    return progress


def _write(path):
    return lambda d: cli._write_json(path, versioned(d))


def test_an_interrupted_run_keeps_a_partial_json_that_loads(tiny_corpus, tmp_path):
    path = tmp_path / "partial.json"
    settings = DiagnoseSettings(model="tiny", batch_size=4, batches=4, budget_s=20)
    with pytest.raises(KeyboardInterrupt):
        diagnose_module.diagnose(target=preset_target(tiny_corpus, settings), settings=settings,
                                 progress=_interrupt_after("throughput"), checkpoint=_write(path))
    partial = Diagnosis.from_dict(json.loads(path.read_text()))
    assert partial.complete is False and [s.name for s in partial.stages] == ["throughput"]
    assert partial.input_bound is None and partial.sweep == () and partial.fixes == () and partial.gpu is None
    assert partial.data is not None and partial.step is not None  # the start-up's
    assert verdicts(partial) == list(partial.verdicts)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and [p.name for p in tmp_path.iterdir()] == ["partial.json"]


def test_no_time_left_is_not_enough_time_to_decide_never_a_guess(tiny_corpus, tmp_path):
    path = tmp_path / "short.json"
    settings = DiagnoseSettings(model="tiny", batch_size=4, batches=4, budget_s=0.001)  # spent by the start-up
    with pytest.raises(KeyboardInterrupt):
        diagnose_module.diagnose(target=preset_target(tiny_corpus, settings), settings=settings,
                                 progress=_interrupt_after("throughput"), checkpoint=_write(path))
    partial = Diagnosis.from_dict(json.loads(path.read_text()))
    [stage] = partial.stages
    assert (stage.name, stage.status, stage.rounds) == ("throughput", TOO_SHORT, 0)
    assert partial.throughput is None or partial.throughput.rate is None
    [verdict] = [v for v in partial.verdicts if v.topic == "stage-throughput"]
    assert verdict.finding.startswith("not enough time to decide: 0 round(s)") and "--budget" in verdict.recommendation


def test_ctrl_c_exits_130_with_the_stages_written_so_far(dataset_with_bad_files, tmp_path, monkeypatch, capfd):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose_module.BottleneckRounds, "run", interrupted)
    path = tmp_path / "out" / "d.json"
    code = cli.main(["diagnose", str(dataset_with_bad_files), "--model", "tiny", "--batches", "4", "--batch-size", "4",
                     "--budget", "15", "--json", str(path)])
    _, err = capfd.readouterr()
    assert code == 130 and "Traceback" not in err
    assert f"the figures measured so far are in {path} (complete: false)" in err
    partial = Diagnosis.from_dict(json.loads(path.read_text()))
    assert partial.complete is False
    assert [(s.name, s.status) for s in partial.stages][-1] == ("bottleneck", INTERRUPTED)
    assert any(v.topic == "stage-bottleneck" and v.finding.startswith("interrupted") for v in partial.verdicts)


def test_a_partial_diagnosis_makes_a_report_that_says_so(run, tmp_path):
    from perfsuite.tools.report import write_report

    result = copy.deepcopy(run.result)
    result.update(complete=False, stages=result["stages"][:1], input_bound=None, sweep=[], gpu=None, trace=None,
                  fixes=[], bottleneck=None, capacity=None, feed=None)
    result["verdicts"] = [v.as_dict() for v in verdicts(Diagnosis.from_dict(result))]
    summary = write_report(result, tmp_path).read_text()
    assert "**Incomplete**" in summary and "stages that ran: throughput" in summary
    assert "## Input-bound share" not in summary and "## Throughput" in summary


def test_progress_lines_show_the_stage_its_share_and_the_time_left():
    line = cli.progress_line(Event("step", "round", "round 2 measured", 48.0, 12.4, 130.2))
    assert line == "perfsuite diagnose [step] round 2 measured | 12/48 s of its share, 130 s of the budget left"
    assert cli.progress_line(Event("plan", "plan", "budget 180 s", None, 0.0, 170.0)).endswith(
        "(170 s of the budget left)")


# ------------------------------------------------------------------------------- verdict rules


def _figure(values, boundaries=()):
    return estimate(values, boundaries)


def _bound(shares):
    return InputBoundFigures(share=_figure(shares, INPUT_BOUND_BOUNDARIES),
                             classification=classify_input_bound(sorted(shares)[len(shares) // 2]),
                             t_real=1.0, t_synthetic=1.0, real_round_s=(1.0,) * len(shares),
                             synthetic_round_s=(1.0,) * len(shares), batches=4, warmup=1)


def _topics(found):
    return {v.topic: v for v in found}


def _said(bound):
    return input_bound_finding("input-bound", "the pipeline", bound, "advice")


def test_a_share_the_step_does_not_wait_for_is_named_contention():
    contended = replace(_bound([0.10, 0.11, 0.12]), wait=_figure([0.001, 0.002, 0.001], INPUT_BOUND_BOUNDARIES))
    waiting = replace(contended, wait=_figure([0.08, 0.09, 0.10], INPUT_BOUND_BOUNDARIES))
    found = {name: _said(bound).finding for name, bound in
             (("contended", contended), ("waiting", waiting), ("older file", _bound([0.10, 0.11, 0.12])))}
    assert "the step waits for its batch 0.1% of its time: the rest of the loss is CPU the pipeline takes" in (
        found["contended"])
    assert "the step waits for its batch 9.0% of its time" in found["waiting"] and "the rest" not in found["waiting"]
    assert "waits for its batch" not in found["older file"]  # a file before schema 8 has no wait share
    assert "11% of step time lost to input" in found["waiting"] and "waits for input" in found["older file"]
    assert _said(waiting).recommendation == "advice" and _said(_bound([0.0, 0.01, 0.02])).recommendation is None


def test_an_input_bound_share_straddling_5_or_20_percent_is_undecided():
    wav, short = _said(_bound([0.03, 0.12, 0.25])), _said(_bound([0.01, 0.02]))
    assert "straddles the 5% and 20% boundary" in wav.finding and wav.recommendation is None
    assert "moderately input-bound at the median" in wav.finding
    assert short.finding.startswith("the pipeline: not enough time to decide (2 round(s)")


def test_stage_verdicts_say_which_stage_lacked_time_and_how_much_budget_would_do():
    records = (StageRecord("loaders", 20.0, 19.0, 2, TOO_SHORT, "plan", 30.0),
               StageRecord("step", 30.0, 30.0, 5, UNDECIDED, "plan", 10.0),
               StageRecord("sweep", 10.0, 2.0, 0, INTERRUPTED, "plan", None),
               StageRecord("input_bound", 10.0, 5.0, 3, DECIDED, "plan", 5.0))
    found = _topics(stage_verdicts(records, budget_s=180.0))
    assert found["stage-loaders"].recommendation.startswith("raise --budget to about 270 s")
    assert "before every figure was decided" in found["stage-step"].finding
    assert found["stage-sweep"].finding.startswith("interrupted")
    assert "stage-input-bound" not in found


def test_a_stage_stopped_at_its_most_rounds_with_time_left_does_not_say_its_share_was_spent():
    records = (StageRecord("input_bound", 134.0, 18.0, 60, UNDECIDED, "plan", 3.0),
               StageRecord("fixes", 39.0, 37.0, 9, UNDECIDED, "plan", 12.0))
    found = _topics(stage_verdicts(records, budget_s=180.0))
    capped, spent = found["stage-input-bound"], found["stage-fixes"]
    assert capped.finding.startswith("undecided after 60 rounds, the most its rounds take, in 18 s of its 134 s")
    assert "spent" not in capped.finding and capped.recommendation is None
    assert spent.finding.startswith("its 39 s share was spent after 9 rounds")
    assert spent.recommendation == "a longer --budget narrows the intervals"


def test_cycle_and_gpu_rules_follow_the_figures():
    from perfsuite.measure.stats import Cycle
    from perfsuite.measure.utilisation import GpuStats

    cycle = Cycle(significant=True, period=8, strength=0.5, threshold=0.3, n=40, lags_tested=9, note="planted")
    found = variation_finding(cycle, _figure([0.02] * 3, (0.10,)), 40)
    assert "every 8 batches" in found.finding and "raise prefetch" in found.recommendation
    explained = variation_finding(cycle, None, 40, structure={4: "its 4 length buckets"})
    assert "its 4 length buckets" in explained.finding and explained.recommendation is None
    noisy = variation_finding(replace(cycle, significant=False), _figure([0.3] * 3, (0.10,)), 40)
    assert "vary by 30%" in noisy.finding and noisy.interval.rounds == 3
    gpu = GpuFigures(available=True, stats=GpuStats(
        device_index=0, device_name="gpu", source="polling", samples=40, sample_spacing_s=0.1, util_median=12.0,
        util_mean=15.0, idle_fraction=0.7, idle_threshold=10.0, variation_ratio=0.5, oscillation=cycle,
        oscillation_period_s=None, oscillation_swing=None, starvation_episodes=3, longest_starvation_s=1.0,
        mem_used_max=None, sm_clock_median=None, complete=True, error=None))
    assert "12%" in _topics(gpu_verdicts(gpu))["gpu"].finding
    assert gpu_verdicts(GpuFigures(available=False, reason="no NVML")) == []


# --------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args", [
    ["diagnose"],
    ["diagnose", "/nonexistent/dataset"],
    ["diagnose", ".", "--batch-size", "0"],
    ["diagnose", ".", "--model", "huge"],
    ["diagnose", ".", "--workers", "0"],
    ["diagnose", ".", "--budget", "0"],
    ["diagnose", ".", "--budget", "soon"],
], ids=["no-path", "missing-dir", "zero-batch", "bad-model", "zero-workers", "zero-budget", "word-budget"])
def test_usage_errors_exit_2_without_traceback(capfd, args):
    assert cli.main(args) == 2
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "usage:" in err


def test_report_without_matplotlib_is_a_usage_error_naming_the_extra(capfd, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert cli.main(["diagnose", str(tmp_path), "--report", str(tmp_path / "report")]) == 2
    _, err = capfd.readouterr()
    assert "--report needs matplotlib" in err and "perfsuite[report]" in err and "Traceback" not in err


def test_a_directory_without_metadata_exits_1_naming_it(capfd, tmp_path):
    assert cli.main(["diagnose", str(tmp_path), "--model", "tiny"]) == 1
    _, err = capfd.readouterr()
    assert "metadata.csv" in err and "Traceback" not in err


def test_settings_validate_and_default_the_batch_size_sweep():
    assert DiagnoseSettings(batch_size=16).sweep_batch_sizes == (8, 16, 32)
    assert DiagnoseSettings().budget_s == 180.0
    with pytest.raises(ValueError, match="batches: expected an integer >= 1, found 0"):
        DiagnoseSettings(batches=0)
    with pytest.raises(ValueError, match="budget_s: expected a number of seconds > 0, found -1"):
        DiagnoseSettings(budget_s=-1)


# ------------------------------------------------------------------------------------ the sweep


def _sweep_verdict(axis, current, values):
    [verdict] = sweep_verdicts((sweep_figures(axis=axis, current=current, values=values),))
    assert verdict.topic == axis
    return verdict


def test_a_point_faster_in_every_round_beyond_the_noise_is_recommended():
    values = {1: [100.0, 104.0, 98.0], 2: [150.0, 160.0, 155.0], 4: [240.0, 250.0, 245.0]}
    figures = sweep_figures(axis="workers", current=2, values=values)
    rows = {row.point: row for row in figures.points}
    assert rows[2].vs_current is None and rows[2].samples_per_s == 155.0 and rows[2].current
    assert rows[2].samples_per_s_spread == pytest.approx(10 / 155)
    assert rows[4].vs_current.ratios == pytest.approx([240 / 150, 250 / 160, 245 / 155])
    assert rows[4].vs_current.significant and not rows[1].vs_current.significant
    verdict = _sweep_verdict("workers", 2, values)
    assert verdict.recommendation == "set num_parallel_calls=4"
    assert verdict.evidence["best"] == "4 workers" and verdict.evidence["rounds_faster"] == "3/3"
    assert verdict.evidence["w4_samples_per_s"] == 245.0
    assert "1.58x" in verdict.finding and "faster in 3/3 rounds" in verdict.finding


@pytest.mark.parametrize("candidate, why", [
    ([150.0, 80.0, 160.0, 90.0, 140.0], "median 1.4x, but slower in 2 of 5 rounds"),
    ([105.0, 106.0, 104.0, 105.0, 105.0], "faster every round, but by 5 %: under the minimum gain"),
    ([105.0, 180.0, 130.0], "median 1.3x, faster every round, but too erratic: p > 0.05"),
], ids=["mostly-slower", "tiny-gain", "erratic"])
def test_no_clear_winner_gives_no_recommendation(candidate, why):
    current = [100.0] * len(candidate)
    verdict = _sweep_verdict("workers", 2, {2: current, 4: candidate})
    assert verdict.recommendation is None, why
    assert "beyond the round-to-round noise" in verdict.finding
    assert verdict.evidence["best"] == "4 workers"


def test_a_current_setting_faster_than_every_other_point_says_so():
    verdict = _sweep_verdict("batch_size", 16, {8: [90.0, 92.0, 91.0], 16: [100.0, 100.0, 100.0],
                                                32: [95.0, 94.0, 96.0]})
    assert verdict.recommendation is None
    assert verdict.finding.startswith("no batch size was faster than the current batch 16 in the same rounds "
                                      "(closest: batch 32 at 0.95x")


def test_fewer_than_the_minimum_rounds_cannot_recommend_and_says_why():
    verdict = _sweep_verdict("workers", 2, {2: [100.0, 101.0], 4: [300.0, 310.0]})
    assert verdict.recommendation is None
    assert verdict.finding.startswith("not enough time to decide (2 round(s); a decision needs 3)")
    assert verdict.interval.rounds == 2 and not verdict.interval.decided


def test_batch_size_and_autotune_recommendations_name_the_setting():
    batch = _sweep_verdict("batch_size", 16, {8: [90.0, 95.0, 92.0], 16: [100.0, 104.0, 101.0],
                                              32: [150.0, 156.0, 150.0]})
    assert batch.recommendation.startswith("batch 32 if the step is input-bound")
    assert batch.evidence["bs32_samples_per_s"] == 150.0
    auto = _sweep_verdict("workers", 2, {-1: [200.0, 210.0, 205.0], 2: [100.0, 101.0, 99.0]})
    assert auto.recommendation == "set num_parallel_calls=tf.data.AUTOTUNE"


def test_sweep_points_include_the_current_setting():
    assert sweep_points("workers", DiagnoseSettings(workers=3)) == (1, 2, 3, 4)
    assert sweep_points("workers", DiagnoseSettings(workers=-1)) == (-1, 1, 2, 4)
    assert sweep_points("batch_size", DiagnoseSettings(batch_size=16, sweep_batch_sizes=(64,))) == (16, 64)
    with pytest.raises(ValueError, match="current: expected one of the measured points"):
        sweep_figures(axis="workers", current=8, values={1: [1.0], 2: [2.0]})


# ------------------------------------------------------------------------------ small datasets


@pytest.mark.parametrize("usable", [1, 3, 8, 10, 24, 100])
def test_a_small_dataset_is_repeated_to_full_batches_of_one_round(usable):
    settings = DiagnoseSettings(batch_size=16, batches=16)  # batch sizes 8, 16, 32: a round draws 512
    copies = repeat_copies(usable, settings)
    total = copies * usable
    assert 512 <= total <= 1024 and total % 32 == 0
    assert (copies - 1) * usable < 512 or (copies - 1) * usable % 32 != 0  # no fewer copies would do


def test_full_batches_are_not_bought_with_a_much_larger_view():
    settings = DiagnoseSettings(batch_size=16, batches=16)
    assert repeat_copies(511, settings) == 2  # 32 copies would make every batch full, at 16,352 utterances
    assert repeat_copies(512, settings) == 1 and repeat_copies(13100, settings) == 1


def test_repeated_view_links_every_file_and_loads(tiny_corpus, tiny_cache, tmp_path):
    from perfsuite.data.audio import MelConfig
    from perfsuite.data.corpus import read_metadata
    from perfsuite.data.loaders import LoaderConfig, preflight

    ids = [utt.id for utt in read_metadata(tiny_corpus)][:3]
    view_ids = write_repeated_view(tiny_corpus, tiny_cache, ids=ids, copies=4, root=tmp_path / "data",
                                   view_cache=tmp_path / "cache")
    assert len(view_ids) == len(set(view_ids)) == 12 and view_ids[3] == f"{ids[0]}__r1"
    assert [utt.id for utt in read_metadata(tmp_path / "data")] == view_ids
    for source in ("wav", "cache"):
        config = LoaderConfig(source=source, on_error="skip")
        records, skipped = preflight(dataset_dir=tmp_path / "data", config=config, cache_dir=tmp_path / "cache",
                                     mel_config=MelConfig())
        assert len(records) == 12 and not skipped


# ------------------------------------------------------------------------------- the emulated GPU


@pytest.mark.parametrize("fed,low,high,step,expected", [
    (0.01, 0.008, 0.012, 0.05, True),  # the step is above the whole interval
    (0.01, 0.008, 0.012, 0.012, True),
    (0.01, 0.008, 0.012, 0.005, False),  # below: a step this short was seen to fail
    (0.01, 0.008, 0.012, 0.008, False),
    (0.01, 0.008, 0.012, 0.010, None),  # inside: undecided
    (0.001, None, 0.001, 0.0005, None),  # fed at the shortest step searched: shorter ones unknown
    (0.001, None, 0.001, 0.05, True),
    (None, 0.2, None, 0.05, False),  # no step up to 0.2 s fed
    (None, 0.2, None, 0.5, None),
])
def test_a_step_is_judged_by_the_feed_rates_interval(fed, low, high, step, expected):
    assert keeps_busy(fed, low, high, step) is expected


def produced(every_s: float, *, mel_len: bool = True):
    """Endless dict batches of 4 x 100 frames, each taking every_s to produce in the consumer's thread."""
    while True:
        time.sleep(every_s)
        batch = {"mel": np.zeros((4, 100, 80), np.float32)}
        if mel_len:
            batch["mel_len"] = np.full(4, 100, np.int32)
        yield batch


def test_a_source_that_cannot_keep_up_would_starve_the_step_and_says_so():
    # 20 ms per batch in the consumer's thread against a 5 ms step: busy about 5 / 25.
    figures = feed_figures(produced(0.02), label="slow", step_time="0.005", share_s=4.0)
    assert figures.keeps_busy is False and figures.step_s == pytest.approx(0.005)
    assert figures.round.busy_fraction < 0.5
    assert FeedFigures.from_dict(json.loads(json.dumps(figures.as_dict()))) == figures
    verdict = feed_verdict(figures)
    assert verdict.topic == "feed-slow" and "would starve a 5 ms step (0.005)" in verdict.finding
    assert verdict.recommendation and verdict.evidence["busy_fraction"] == figures.round.busy_fraction


def test_a_fast_source_keeps_a_long_step_busy():
    figures = feed_figures(produced(0.0), label="fast", step_time="0.05", share_s=4.0)
    assert figures.keeps_busy is True and figures.stats.util_median > 85
    assert "keeps a 50 ms step (0.05) >= 90 % busy" in feed_verdict(figures).finding


def test_a_per_frame_preset_on_batches_without_lengths_is_left_out_with_the_reason():
    figures = feed_figures(produced(0.0, mel_len=False), label="no-lengths", step_time="fastpitch-a100-tf32",
                           share_s=2.0)
    assert figures.feed.step_s is not None  # the feed rate needs no step time
    assert figures.step_s is None and figures.timeline is None
    assert "mel_len" in figures.reason and "--step-time SECONDS" in figures.reason
    assert figures.reason in feed_verdict(figures).finding


@pytest.mark.parametrize("spec", ["0", "-1", "nan", "a100", ""])
def test_a_bad_step_time_is_refused_when_parsed(spec, capsys):
    assert cli.main(["diagnose", "--pipeline", "x:y", "--step-time", spec]) == 2
    assert "argument --step-time: step time: expected seconds > 0 or one of fastpitch-a100-tf32" in capsys.readouterr().err
    with pytest.raises(ValueError, match="step time: expected seconds > 0"):
        DiagnoseSettings(step_time=spec)


def _stored(name):
    return json.loads((Path(__file__).parent / "data" / f"{name}.json").read_text())


@pytest.mark.parametrize("version", [4, 5, 6])
def test_a_dataset_file_of_an_older_schema_loads_as_the_one_record(version):
    stored = _stored(f"diagnose_schema{version}")  # each written by the diagnose of its schema
    loaded = Diagnosis.from_dict(stored)
    assert loaded.target.dataset == stored["dataset"] and loaded.graph is None and loaded.data is not None
    base = next(p for p in stored["pipelines"] if p["pipeline"] == {"kind": "tf_native", "source": "wav"})
    assert loaded.throughput.rate.median == base["samples_per_s"]["median"]
    assert loaded.throughput.batch_s == pytest.approx(base["loader"]["batch_s"])
    gains = {fix.name: fix.gain for fix in loaded.fixes}
    wav = next(c for c in stored["comparisons"] if c["b"] == {"kind": "numpy_function", "source": "wav"})
    assert gains["loader numpy_function-wav"].median == pytest.approx(
        estimate([1 / r for r in wav["ratios"]]).median)  # the alternative's speed over the base's, per round
    modes = {"step xla": "xla_over_graph", "step eager": "graph_over_eager"}
    assert {name for name, ratio in modes.items() if ratio in stored["step"]["ratios"]} <= set(gains)
    assert loaded.verdicts  # the findings as they were written
    assert Diagnosis.from_dict(versioned(loaded)) == loaded


def test_older_dataset_files_migrate_as_their_schemas_did():
    stored = {version: _stored(f"diagnose_schema{version}") for version in (4, 5, 6)}
    assert "kind" not in stored[4] and Diagnosis.from_dict(stored[4]) == Diagnosis.from_dict(stored[5])
    loaded = Diagnosis.from_dict(stored[6])
    assert loaded == Diagnosis.from_dict(stored[5])  # the schema-6 file: the schema-5 one as 6's code wrote it
    old = next(f for f in stored[6]["feed"] if f["pipeline"] == "tf_native-wav")
    assert loaded.feed.feed.step_s == old["feed"]["step_s"] and loaded.feed.round.as_dict() == old["round"]
    assert [axis.axis for axis in loaded.sweep] == [axis["axis"] for axis in stored[6]["sweep"]]


def test_a_pipeline_file_loads_as_the_one_record():
    stored = _stored("pipeline_schema6")
    loaded = Diagnosis.from_dict(stored)
    assert loaded.target.pipeline == stored["target"]["pipeline"] and loaded.target.dataset is None
    assert loaded.throughput.rate.as_dict() == stored["throughput"]["rate"]
    assert loaded.capacity is None and loaded.data is None and loaded.sweep == ()
    assert Diagnosis.from_dict(versioned(loaded)) == loaded
    with pytest.raises(RecordError, match="schema_version: expected one of"):
        Diagnosis.from_dict({**stored, "schema_version": 1})
