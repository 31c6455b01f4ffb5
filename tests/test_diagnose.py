"""`perfsuite diagnose`: JSON schema, plots, verdicts that follow the figures, bad files counted, exit codes.

The full diagnosis runs once per module (tiny corpus with two bad WAVs added, tiny model, few
batches; 24 usable utterances are fewer than one round at batch 8 x 4 batches, so it also runs on a
repeated view); the verdict rules are unit-tested on hand-made figures.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfsuite import cli
from perfsuite.diagnose import (
    STEP_MODES,
    DiagnoseSettings,
    repeat_copies,
    sweep_figures,
    sweep_points,
    verdicts,
    write_repeated_view,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wav"
BAD = ("pcm24", "not_a_wav")
PIPELINES = ("tf_native-wav", "numpy_function-wav", "tf_native-cache", "numpy_function-cache")


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


@pytest.fixture(scope="module")
def diagnosis(dataset_with_bad_files, tmp_path_factory):
    """One diagnose run through the CLI: (exit code, stdout, stderr, JSON, report dir)."""
    out_dir = tmp_path_factory.mktemp("diagnose-out")
    capture = pytest.MonkeyPatch()
    import io
    import sys

    stdout, stderr = io.StringIO(), io.StringIO()
    capture.setattr(sys, "stdout", stdout)
    capture.setattr(sys, "stderr", stderr)
    try:
        code = cli.main(["diagnose", str(dataset_with_bad_files), "--model", "tiny", "--batches", "4",
                         "--rounds", "1", "--batch-size", "4", "--json", str(out_dir / "result.json"),
                         "--report", str(out_dir / "report"), "--trace", str(out_dir / "trace")])
    finally:
        capture.undo()
    result = json.loads((out_dir / "result.json").read_text())
    return code, stdout.getvalue(), stderr.getvalue(), result, out_dir


def test_bad_files_are_listed_counted_and_the_rest_measured(diagnosis, tiny_corpus):
    code, out, _, result, _ = diagnosis
    assert code == 1  # data problems found, measured on the rest
    listed = [line.split(": expected ")[0] for line in out.splitlines() if ": expected " in line]
    assert sorted(Path(p).stem for p in listed) == sorted(BAD)
    good = len((tiny_corpus / "metadata.csv").read_text().splitlines())
    assert result["data"]["skipped"] == 2
    assert result["data"]["checked"] == good + 2
    assert result["data"]["usable"] == good
    assert "Traceback" not in out


def test_a_dataset_smaller_than_a_round_is_measured_repeated_and_says_so(diagnosis, tiny_corpus):
    _, out, _, result, _ = diagnosis
    good = len((tiny_corpus / "metadata.csv").read_text().splitlines())
    # 24 utterances < 8 (largest batch) x 4 batches: listed twice, 48 = a multiple of 2, 4 and 8
    assert result["data"]["repeat"] == {"copies": 2, "utterances_measured": 2 * good, "round_samples": 32}
    assert "[data-size] only 24 usable utterance(s)" in out
    for pipeline in result["pipelines"].values():  # full batches only
        loader = pipeline["loader"]
        assert loader["samples"] == 4 * loader["batches"]


def test_json_holds_every_figure_settings_and_fingerprint(diagnosis):
    _, _, _, result, out_dir = diagnosis
    assert result["settings"]["batch_size"] == 4 and result["settings"]["model"] == "tiny"
    assert result["settings"]["batches"] == 4
    assert set(result["fingerprint"]) == {"cpu_model", "cpu_count", "gpu_model", "gpu_driver", "tensorflow", "onednn"}
    assert set(result["pipelines"]) == set(PIPELINES)
    for pipeline in result["pipelines"].values():
        bound = pipeline["input_bound"]
        assert bound["t_real"] > 0 and bound["t_synthetic"] > 0
        assert bound["share"] == pytest.approx(1 - bound["t_synthetic"] / bound["t_real"])
        loader = pipeline["loader"]
        assert loader["samples_per_s"] > 0 and len(loader["batch_s"]) == loader["batches"] == 4
        assert "variation_ratio" in loader and "cycle_significant" in loader
    assert set(result["step"]["modes"]) == set(STEP_MODES)
    for figures in result["step"]["modes"].values():
        assert figures["batch_mean_s"] > 0
    assert result["step"]["modes"]["graph"]["retraces"] == 0  # static shapes: one trace
    for ratio in result["step"]["ratios"].values():  # same-round ratios, one per interleaved round
        assert len(ratio["rounds"]) == 1 and ratio["median"] == ratio["rounds"][0] > 0
    for axis, points, current in (("workers", [1, 2, 4], 2), ("batch_size", [2, 4, 8], 4)):
        sweep = result["sweep"][axis]
        assert [row[axis] for row in sweep["points"]] == points
        assert sweep["current"] == current and sweep["rounds"] == 1
        assert sweep["order"] == [points[::-1]]  # the warm-up round ran forwards, the measured one backwards
        for row in sweep["points"]:
            assert row["current"] == (row[axis] == current)
            assert row["samples_per_s_low"] <= row["samples_per_s"] <= row["samples_per_s_high"]
            assert len(row["samples_per_s_rounds"]) == 1
            if row["current"]:
                assert row["vs_current"] is None
            else:
                gain = row["vs_current"]
                assert gain["ratios"] == [pytest.approx(row["samples_per_s"] / sweep["points"][1]["samples_per_s"])]
                assert gain["p_value"] is None and gain["significant"] is False  # one round: no test
    assert result["sweep"]["batch_size"]["batches"] == {"2": 8, "4": 4, "8": 2}  # about equal samples a round
    assert result["gpu"]["available"] in (True, False)
    if not result["gpu"]["available"]:
        assert result["gpu"]["reason"]
    assert result["cache"]["temporary"] is True  # the corpus copy has no cache: one was built
    assert any((out_dir / "trace").rglob("*.xplane.pb"))


def test_printed_verdicts_are_the_json_verdicts_with_evidence(diagnosis):
    _, out, err, result, _ = diagnosis
    assert result["verdicts"]
    for verdict in result["verdicts"]:
        assert f"[{verdict['topic']}] {verdict['finding']}" in out
        assert verdict["evidence"]
    assert "perfsuite diagnose [1] checking the data" in err  # stage lines on stderr


def test_report_has_non_empty_pngs_linked_from_the_summary(diagnosis):
    _, _, _, _, out_dir = diagnosis
    report = out_dir / "report"
    pngs = sorted(report.glob("*.png"))
    assert {p.name for p in pngs} >= {"batch_timeline.png", "throughput_vs_workers.png",
                                      "throughput_vs_batch_size.png"}
    summary = (report / "summary.md").read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert f"]({png.name})" in summary


def test_summary_notes_drift_of_the_same_setting_measured_three_times(diagnosis):
    import copy

    from perfsuite.report import markdown_summary

    result = copy.deepcopy(diagnosis[3])
    same = result["pipelines"]["tf_native-wav"]["loader"]["samples_per_s"]
    for axis in ("workers", "batch_size"):
        next(row for row in result["sweep"][axis]["points"] if row["current"])["samples_per_s"] = same
    assert "measured 3 times" not in markdown_summary(result, [])
    next(row for row in result["sweep"]["batch_size"]["points"] if row["current"])["samples_per_s"] = 2 * same
    assert f"{2 * same:.0f} samples/s in the batch-size sweep" in markdown_summary(result, [])


# ------------------------------------------------------------------------------- verdict rules


def _ab(ratio):
    return {"ratio_median": ratio, "ratio_low": ratio, "ratio_high": ratio, "ratios": [ratio] * 3}


def _pipeline(*, samples_per_s=100.0, share=0.0, variation=0.02, cycle=None):
    return {"loader": {"samples_per_s": samples_per_s, "variation_ratio": variation, "batches": 40,
                       "cycle_significant": cycle is not None, "cycle_period": cycle},
            "input_bound": {"share": share, "t_real": 1.0, "t_synthetic": 1.0 - share}}


def _topics(found):
    return {v.topic: v for v in found}


def test_faster_tf_native_gives_a_switch_recommendation_equal_speeds_none():
    found = _topics(verdicts({"comparisons": {"tf_native_vs_numpy_function-wav": _ab(3.0),
                                              "tf_native_vs_numpy_function-cache": _ab(1.02)}}))
    assert "3.0x slower than tf_native" in found["loader-wav"].finding
    assert "tf_native" in found["loader-wav"].recommendation
    assert found["loader-wav"].evidence["tf_native_over_numpy_function"] == 3.0
    assert found["loader-cache"].recommendation is None


def test_input_bound_share_is_classified_and_the_fed_fast_pipeline_recommended():
    pipelines = {"numpy_function-wav": _pipeline(samples_per_s=50, share=0.3),
                 "tf_native-wav": _pipeline(samples_per_s=500, share=0.10),
                 "tf_native-cache": _pipeline(samples_per_s=2000, share=0.01),
                 "numpy_function-cache": _pipeline(samples_per_s=900, share=-0.02)}
    found = _topics(verdicts({"pipelines": pipelines}))
    assert "highly input-bound" in found["input-numpy_function-wav"].finding
    assert "moderately input-bound" in found["input-tf_native-wav"].finding
    assert "tf_native-cache" in found["input-numpy_function-wav"].recommendation
    assert found["input-tf_native-cache"].recommendation is None
    assert "not input-bound" in found["input-numpy_function-cache"].finding
    assert found["cache"].evidence["cache_over_wav"] == 4.0 and "4.0x faster" in found["cache"].finding


def test_step_cycle_workers_and_gpu_rules_follow_the_figures():
    def step(eager, graph, xla, *, rounds=((1.0, 1.0),)):
        """Step times, and per-round speed ratios (graph over eager, XLA over graph) as a run measures them."""
        modes = {"eager": {"batch_mean_s": eager, "first_s": eager, "retraces": None},
                 "graph": {"batch_mean_s": graph, "first_s": 1.0, "retraces": 0},
                 "xla": {"batch_mean_s": xla, "first_s": 3.0, "retraces": 0}}
        per_round = {"graph_over_eager": [r[0] for r in rounds], "xla_over_graph": [r[1] for r in rounds]}
        ratios = {name: {"median": float(np.median(values)), "rounds": values} for name, values in per_round.items()}
        return {"step": {"modes": modes, "ratios": ratios}}

    found = verdicts(step(0.35, 0.32, 0.24, rounds=[(1.09, 1.33), (1.1, 1.3), (1.08, 1.35)]))
    assert [v.finding.split(" is ")[0] for v in found] == ["XLA step"]  # eager vs graph 1.09x: no finding
    assert "jit_compile=True" in found[0].recommendation and found[0].evidence["xla_over_graph_per_round"][2] == 1.35
    same = verdicts(step(0.30, 0.30, 0.30, rounds=[(1.0, 1.0), (1.02, 0.98), (0.99, 1.01)]))
    assert len(same) == 1 and same[0].recommendation is None
    # The same-round ratios decide, not the means: means measured apart can disagree with them.
    drifted = verdicts(step(0.30, 0.30, 0.20, rounds=[(1.0, 1.01), (1.0, 0.99), (1.0, 1.0)]))
    assert len(drifted) == 1 and drifted[0].recommendation is None
    cycle = _topics(verdicts({"pipelines": {"tf_native-wav": {"loader": _pipeline(cycle=8)["loader"]}}}))
    assert "every 8 batches" in cycle["cycle-tf_native-wav"].finding
    gpu = {"gpu": {"available": True, "stats": {"gpu_util_median": 12.0, "gpu_idle_fraction": 0.7,
                                                "gpu_oscillation_period_s": None}}}
    assert "12%" in _topics(verdicts(gpu))["gpu"].finding
    assert verdicts({"gpu": {"available": False, "reason": "no NVML"}}) == []


# --------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args", [
    ["diagnose"],
    ["diagnose", "/nonexistent/dataset"],
    ["diagnose", ".", "--batch-size", "0"],
    ["diagnose", ".", "--model", "huge"],
    ["diagnose", ".", "--workers", "0"],
], ids=["no-path", "missing-dir", "zero-batch", "bad-model", "zero-workers"])
def test_usage_errors_exit_2_without_traceback(capfd, args):
    assert cli.main(args) == 2
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "usage:" in err


def test_report_without_matplotlib_is_a_usage_error_naming_the_extra(capfd, tmp_path, monkeypatch):
    import sys

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
    with pytest.raises(ValueError, match="batches: expected an integer >= 1, found 0"):
        DiagnoseSettings(batches=0)


# ------------------------------------------------------------------------------------ the sweep


def _sweep_verdict(axis, current, values):
    found = _topics(verdicts({"sweep": {axis: sweep_figures(axis=axis, current=current, values=values)}}))
    return found[axis]


def test_a_point_faster_in_every_round_beyond_the_noise_is_recommended():
    values = {1: [100.0, 104.0, 98.0], 2: [150.0, 160.0, 155.0], 4: [240.0, 250.0, 245.0]}
    figures = sweep_figures(axis="workers", current=2, values=values)
    rows = {row["workers"]: row for row in figures["points"]}
    assert rows[2]["vs_current"] is None and rows[2]["samples_per_s"] == 155.0
    assert rows[2]["samples_per_s_spread"] == pytest.approx(10 / 155)
    assert rows[4]["vs_current"]["ratios"] == pytest.approx([240 / 150, 250 / 160, 245 / 155])
    assert rows[4]["vs_current"]["significant"] and not rows[1]["vs_current"]["significant"]
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


def test_one_round_cannot_recommend_and_says_why():
    verdict = _sweep_verdict("workers", 2, {2: [100.0], 4: [300.0]})
    assert verdict.recommendation is None and "one round only" in verdict.finding
    assert "p_value" not in verdict.evidence


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
    from perfsuite.audio import MelConfig
    from perfsuite.corpus import read_metadata
    from perfsuite.loaders import LoaderConfig, preflight

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
