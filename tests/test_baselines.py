"""Baseline files: fingerprints, loading and validation, checks, recording, concurrency and crashes."""

import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure.machine import MachineFingerprint, default_profile_name
from perfsuite.verdict import baselines
from perfsuite.verdict import metrics as metric_registry
from perfsuite.verdict.baselines import (
    UNKNOWN_MACHINE_NOTE,
    BaselineError,
    load_baselines,
    load_profile,
    load_ratios,
    record_measurements,
    threshold_from_measurement,
)
from perfsuite.verdict.gates import check_benchmark, gates_not_measured

CPU = MachineFingerprint(
    cpu_vendor="Intel", cpu_family=6, cpu_model_number=85, cpu_stepping=7,
    cpu_model_name="Intel(R) Xeon(R) CPU @ 2.20GHz", isa=("avx", "avx2", "avx512f", "fma", "sse4_2"), cores=2,
    l2_cache_kib=1024, l3_cache_kib=39424, memory_gib=7.8, tensorflow="2.21.0", tensorflow_cuda=None,
    tensorflow_cudnn=None, onednn=True, gpu_model=None, gpu_driver=None, gpu_cuda_driver=None,
    gpu_power_limit_w=None,
)


def _with(fingerprint, **changes):
    return MachineFingerprint.from_dict({**fingerprint.as_dict(), **changes})


GPU = _with(
    CPU, cpu_vendor="AMD", cpu_family=25, cpu_model_number=1, cpu_stepping=1, cpu_model_name="AMD EPYC",
    isa=["avx", "avx2", "f16c", "fma", "sse4_2"], cores=16, l2_cache_kib=512, l3_cache_kib=32768,
    memory_gib=251.5, tensorflow_cuda="12.5.1", tensorflow_cudnn="9", gpu_model="NVIDIA H200",
    gpu_driver="550.54.15", gpu_cuda_driver="12.4", gpu_power_limit_w=700,
)
BENCH = "loaders/test_loader[tf_native-wav-bs16-w2]"
NO_RATIOS = baselines.RatioGates(path=Path("ratios.yaml"), gates={})


def record(path, *, benchmark_id=BENCH, metrics, margin=0.25, fingerprint=CPU):
    return record_measurements(path, profile_name=Path(path).stem, fingerprint=fingerprint,
                               benchmark_id=benchmark_id, metrics=metrics, margin=margin)


def write(path, text):
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------
# Recording, loading and checking


def test_record_load_check_round_trip(tmp_path):
    path = tmp_path / "cpu-2core.yaml"
    record(path, metrics={"samples_per_s": 1000.0, "variation_ratio": 0.2, "input_bound": 0.01})

    document = yaml.safe_load(path.read_text())
    assert document["profile"] == "cpu-2core"
    assert document["fingerprint"] == CPU.as_dict()
    assert document["margin"] == 0.25
    # 1000 - 25 %; 0.2 + 25 %; 0.01 + the 0.02 floor (25 % of 0.01 would be noise-tight).
    assert document["benchmarks"] == {
        BENCH: {"min_samples_per_s": 750.0, "max_variation_ratio": 0.25, "max_input_bound": 0.03}
    }

    profile = load_profile(path)
    measured = {"samples_per_s": 1000.0, "variation_ratio": 0.2, "input_bound": 0.01}
    result = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=measured)
    assert result.passed and len(result.verdicts) == 3 and result.notes == ()

    at_edge = {**measured, "samples_per_s": 750.0}
    assert check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=at_edge).passed

    slower = {**measured, "samples_per_s": 749.0}
    result = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=slower)
    (failure,) = result.failures
    assert failure.message == f"samples_per_s: fail: measured 749, threshold ≥ 750 ({path})"
    assert (failure.kind, failure.threshold, failure.measured) == ("min", 750.0, 749.0)
    assert failure.source == str(path)


ROUNDING = 1.01e-3  # 4 significant digits loosen a threshold by at most 1e-3 of its value
finite_positive = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(
    metrics=st.dictionaries(st.sampled_from(sorted(m.name for m in metric_registry.declared())), finite_positive, min_size=1),
    margin=st.floats(min_value=0.0, max_value=0.95),
)
def test_recorded_values_pass_and_values_beyond_the_margin_fail(metrics, margin):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cpu-2core.yaml"
        record(path, metrics=metrics, margin=margin)
        profile = load_profile(path)

    result = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=metrics)
    assert result.passed and len(result.verdicts) == len(metrics)

    for threshold in profile.benchmarks[BENCH]:
        measured = metrics[threshold.metric]
        rule = metric_registry.lookup(threshold.metric)
        # The threshold sits at the margin, loosened only by rounding to 4 significant digits.
        if rule.threshold_kind == "min":
            at_margin = measured - measured * margin
            assert at_margin * (1 - ROUNDING) <= threshold.value <= at_margin * (1 + 1e-12)
        else:
            at_margin = measured + max(measured * margin, rule.floor)
            assert at_margin * (1 - 1e-12) <= threshold.value <= at_margin * (1 + ROUNDING)
        beyond = math.nextafter(threshold.value, -math.inf if threshold.kind == "min" else math.inf)
        worse = {**metrics, threshold.metric: beyond}
        failed = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=worse)
        assert [v.metric for v in failed.failures] == [threshold.metric]


def test_record_keeps_other_benchmarks_and_other_metrics(tmp_path):
    path = tmp_path / "cpu-2core.yaml"
    record(path, benchmark_id="a", metrics={"samples_per_s": 100.0})
    record(path, benchmark_id="b", metrics={"samples_per_s": 200.0})
    profile = record(path, benchmark_id="a", metrics={"input_bound": 0.5, "samples_per_s": 400.0})

    thresholds = {bid: {t.key: t.value for t in ts} for bid, ts in load_profile(path).benchmarks.items()}
    assert thresholds == {"a": {"min_samples_per_s": 300.0, "max_input_bound": 0.625},
                          "b": {"min_samples_per_s": 150.0}}
    written = {bid: {t.key: t.value for t in ts} for bid, ts in profile.benchmarks.items()}
    assert written == thresholds  # the returned profile is what was written


def test_record_refuses_another_machines_file_and_leaves_it_alone(tmp_path):
    path = tmp_path / "cpu-2core.yaml"
    record(path, metrics={"samples_per_s": 100.0})
    before = path.read_bytes()
    with pytest.raises(BaselineError) as error:
        record(path, metrics={"samples_per_s": 100.0}, fingerprint=GPU)
    assert error.value.key == "fingerprint" and error.value.path == str(path)
    assert "recorded for other hardware" in str(error.value)
    assert "cores: profile has 2, this machine has 16" in str(error.value)
    assert "gpu_model: profile has None, this machine has 'NVIDIA H200'" in str(error.value)
    assert path.read_bytes() == before


def test_record_refuses_a_different_margin(tmp_path):
    path = tmp_path / "cpu-2core.yaml"
    record(path, metrics={"samples_per_s": 100.0}, margin=0.25)
    with pytest.raises(BaselineError, match=r"margin: expected margin 0.25 .* found 0.3"):
        record(path, metrics={"samples_per_s": 100.0}, margin=0.3)


def test_record_refuses_to_overwrite_a_malformed_file(tmp_path):
    path = write(tmp_path / "cpu-2core.yaml", "profile: [unclosed\n")
    with pytest.raises(BaselineError, match="invalid YAML"):
        record(path, metrics={"samples_per_s": 100.0})
    assert path.read_text() == "profile: [unclosed\n"


@pytest.mark.parametrize(
    ("kwargs", "key", "problem"),
    [
        ({"metrics": {"throughput": 1.0}},
         'benchmarks."loaders/test_loader[tf_native-wav-bs16-w2]".throughput',
         "expected a metric declared in perfsuite.verdict.metrics"),
        ({"metrics": {"samples_per_s": float("nan")}},
         'benchmarks."loaders/test_loader[tf_native-wav-bs16-w2]".samples_per_s',
         "expected a finite number, found float nan"),
        ({"metrics": {"samples_per_s": "fast"}},
         'benchmarks."loaders/test_loader[tf_native-wav-bs16-w2]".samples_per_s',
         "expected a finite number, found str 'fast'"),
        ({"metrics": {}}, 'benchmarks."loaders/test_loader[tf_native-wav-bs16-w2]"', "found none"),
        ({"metrics": {"samples_per_s": 1.0}, "margin": 1.0}, "margin", "expected a margin in [0, 1)"),
        ({"metrics": {"samples_per_s": 1.0}, "margin": -0.1}, "margin", "expected a margin in [0, 1)"),
        ({"metrics": {"samples_per_s": 1.0}, "benchmark_id": ""}, "benchmarks", "expected a benchmark id"),
    ],
)
def test_record_rejects_bad_requests(tmp_path, kwargs, key, problem):
    path = tmp_path / "cpu-2core.yaml"
    with pytest.raises(BaselineError) as error:
        record(path, **kwargs)
    assert (error.value.path, error.value.key) == (str(path), key)
    assert problem in error.value.problem
    assert not path.exists()


def test_record_refuses_a_file_name_that_is_not_the_profile_name(tmp_path):
    with pytest.raises(BaselineError, match="expected a file named gpu-a.yaml"):
        record_measurements(tmp_path / "cpu-2core.yaml", profile_name="gpu-a", fingerprint=CPU,
                            benchmark_id=BENCH, metrics={"samples_per_s": 1.0}, margin=0.25)


def test_threshold_rule_per_direction():
    assert threshold_from_measurement(metric="samples_per_s", measured=1234.5678, margin=0.25).value == 925.9
    assert threshold_from_measurement(metric="variation_ratio", measured=0.123456, margin=0.5).value == 0.1852
    # 10 % of 0.123 is below the 0.02 floor: the floor wins.
    assert threshold_from_measurement(metric="variation_ratio", measured=0.123456, margin=0.1).value == 0.1435
    # A negative input-bound share (synthetic slower than real, by noise) still gets a looser max.
    assert threshold_from_measurement(metric="input_bound", measured=-0.3, margin=0.1).value == -0.27
    assert threshold_from_measurement(metric="retraces", measured=1.0, margin=0.25).value == 1.25


# --------------------------------------------------------------------------------------------------
# Checks: unknown machines, ratio gates, missing metrics, failures reported together


RATIOS = """\
ratios:
  tf_native_over_numpy_function_wav_ratio: {min: 6.0, claim: TF-native is 6x numpy_function}
  xla_over_graph_ratio: {min: 1.25, max: 4.0, claim: XLA gains but not absurdly}
  cache_over_wav_ratio: {min: 2.0, claim: a cache is worth it}
"""


def test_unknown_machine_skips_absolute_thresholds_but_applies_ratio_gates(tmp_path):
    ratios = load_ratios(write(tmp_path / "ratios.yaml", RATIOS))
    metrics = {"samples_per_s": 1.0, "tf_native_over_numpy_function_wav_ratio": 6.5,
               "xla_over_graph_ratio": 4.2}
    result = check_benchmark(profile=None, ratios=ratios, benchmark_id=BENCH, metrics=metrics)

    assert result.notes == ()  # the session's one note says why (load_baselines)
    assert "absolute thresholds skipped" in UNKNOWN_MACHINE_NOTE
    assert {v.source for v in result.verdicts} == {str(tmp_path / "ratios.yaml")}
    outcome = {(v.metric, v.kind): v.passed for v in result.verdicts}
    assert outcome == {("tf_native_over_numpy_function_wav_ratio", "min"): True,
                       ("xla_over_graph_ratio", "min"): True, ("xla_over_graph_ratio", "max"): False}
    assert gates_not_measured(ratios, [result]) == ("cache_over_wav_ratio",)
    assert {v.claim for v in result.verdicts} == {"TF-native is 6x numpy_function", "XLA gains but not absurdly"}


def test_a_ratio_gate_without_a_claim_is_refused_naming_it(tmp_path):
    path = write(tmp_path / "ratios.yaml", "ratios:\n  cache_over_wav_ratio: {min: 2.0}\n")
    with pytest.raises(BaselineError, match=r"ratios.yaml: ratios.cache_over_wav_ratio.claim: expected a value \(required key\)"):
        load_ratios(path)


def test_missing_metric_fails_and_failures_are_reported_together(tmp_path):
    path = write(tmp_path / "cpu-2core.yaml", f"""\
        format: 2
        profile: cpu-2core
        fingerprint: {json.dumps(CPU.as_dict())}
        benchmarks:
          "{BENCH}":
            min_samples_per_s: 900
            max_input_bound: 0.05
            max_variation_ratio: 0.3
    """)
    profile = load_profile(path)
    metrics = {"samples_per_s": 800.0, "variation_ratio": "n/a"}
    result = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics=metrics)

    assert not result.passed and len(result.failures) == 3
    not_measured = next(v for v in result.verdicts if v.metric == "input_bound")
    assert (not_measured.measured, not_measured.note) == (None, "not measured")
    assert not_measured.message == f"input_bound: fail: not measured, threshold ≤ 0.05 ({path})"
    lines = [v.message for v in result.failures]
    assert f"samples_per_s: fail: measured 800, threshold ≥ 900 ({path})" in lines
    assert any("variation_ratio: fail: not a number ('n/a')" in line for line in lines)
    json.dumps(result.as_dict())  # results serialise (they go into extra_info)


def test_known_machine_without_thresholds_for_a_benchmark_says_so(tmp_path):
    path = tmp_path / "cpu-2core.yaml"
    profile = record(path, benchmark_id="other", metrics={"samples_per_s": 1.0})
    result = check_benchmark(profile=profile, ratios=NO_RATIOS, benchmark_id=BENCH, metrics={})
    assert result.passed and result.verdicts == ()
    assert result.notes == (f"no absolute thresholds for {BENCH!r} in {path}",)


# --------------------------------------------------------------------------------------------------
# Profiles and matching (fingerprints themselves: tests/test_machine.py)

FORMAT_1 = """\
profile: cpu-2core
fingerprint:
  cpu_model: AMD EPYC
  cpu_count: 2
  gpu_model: null
  gpu_driver: null
  tensorflow: '2.21'
  onednn: true
margin: 0.5
benchmarks:
  quick::test_step.py::test_step[graph]:
    min_samples_per_s: 100.0
"""


def _profile_text(name, fingerprint):
    return f"format: 2\nprofile: {name}\nfingerprint: {json.dumps(fingerprint.as_dict())}\nbenchmarks: {{}}\n"


def find_profile(directory, *, fingerprint):
    """The profile load_baselines matches to ``fingerprint`` (with the gate file it also needs)."""
    if not (directory / "ratios.yaml").exists():
        write(directory / "ratios.yaml", RATIOS)
    return load_baselines(directory, fingerprint=fingerprint).profile


def test_find_profile_one_none_or_ambiguous(tmp_path):
    write(tmp_path / "cpu-2core.yaml", _profile_text("cpu-2core", CPU))
    write(tmp_path / "gpu-h200.yaml", _profile_text("gpu-h200", GPU))
    write(tmp_path / "ratios.yaml", RATIOS)  # not a profile: ignored by the search

    assert find_profile(tmp_path, fingerprint=_with(CPU, tensorflow="2.21.3")).name == "cpu-2core"
    assert find_profile(tmp_path, fingerprint=GPU).name == "gpu-h200"
    assert find_profile(tmp_path, fingerprint=_with(CPU, cores=4)) is None

    write(tmp_path / "cpu-copy.yaml", _profile_text("cpu-copy", CPU))
    with pytest.raises(BaselineError) as error:
        find_profile(tmp_path, fingerprint=CPU)
    assert str(tmp_path / "cpu-2core.yaml") in str(error.value)
    assert str(tmp_path / "cpu-copy.yaml") in str(error.value)


def test_the_same_hardware_with_other_memory_or_model_name_gets_its_profile(tmp_path):
    write(tmp_path / "cpu-2core.yaml", _profile_text("cpu-2core", CPU))
    renamed = _with(CPU, memory_gib=64.0, cpu_model_name="Intel Xeon Processor (Cascadelake)")
    assert find_profile(tmp_path, fingerprint=renamed).name == "cpu-2core"


def test_another_cpu_generation_behind_the_same_model_name_does_not(tmp_path):
    write(tmp_path / "amd.yaml", _profile_text("amd", GPU))
    newer = _with(GPU, cpu_family=26, cpu_model_number=2, isa=[*GPU.isa, "avx512f", "avx512bw"])
    assert newer.cpu_model_name == GPU.cpu_model_name
    assert find_profile(tmp_path, fingerprint=newer) is None


def test_load_baselines_on_an_unknown_machine_gives_one_note_naming_each_difference(tmp_path):
    write(tmp_path / "cpu-2core.yaml", _profile_text("cpu-2core", CPU))
    write(tmp_path / "gpu-h200.yaml", _profile_text("gpu-h200", GPU))
    write(tmp_path / "old.yaml", FORMAT_1.replace("profile: cpu-2core", "profile: old"))
    write(tmp_path / "ratios.yaml", RATIOS)
    current = _with(CPU, cpu_family=25, l3_cache_kib=32768)
    loaded = load_baselines(tmp_path, fingerprint=current)

    assert loaded.profile is None
    (note,) = loaded.notes
    lines = note.splitlines()
    assert UNKNOWN_MACHINE_NOTE in lines[0]
    assert ("  cpu-2core.yaml: differs: cpu_family: profile has 6, this machine has 25; "
            "l3_cache_kib: profile has 39424, this machine has 32768") in lines
    assert any(line.startswith("  gpu-h200.yaml: differs: cpu_vendor: profile has 'AMD'") for line in lines)
    assert f"  old.yaml: {baselines.FORMAT_1_NOTE}" in lines
    assert lines[-1] == (f"  to record one ({tmp_path / default_profile_name(current)}.yaml): "
                         f"{baselines.record_command(tmp_path)}")
    result = loaded.check(benchmark_id=BENCH, metrics={"cache_over_wav_ratio": 1.5})
    assert [(v.metric, v.passed) for v in result.verdicts] == [("cache_over_wav_ratio", False)]

    assert load_baselines(tmp_path, fingerprint=CPU).notes == ()
    (tmp_path / "ratios.yaml").unlink()
    with pytest.raises(BaselineError, match=r"ratios.yaml: \(file\): expected a baseline file, found no"):
        load_baselines(tmp_path, fingerprint=CPU)


def test_a_directory_without_profiles_says_so_in_its_note(tmp_path):
    write(tmp_path / "ratios.yaml", RATIOS)
    (note,) = load_baselines(tmp_path, fingerprint=CPU).notes
    assert "  (the directory holds no profile)" in note.splitlines()


def test_a_format_1_profile_is_listed_as_not_applicable_not_an_error(tmp_path):
    write(tmp_path / "cpu-2core.yaml", FORMAT_1)
    write(tmp_path / "ratios.yaml", RATIOS)
    # Whatever the machine: format 1 cannot say which hardware it came from.
    for fingerprint in (CPU, GPU, _with(CPU, cpu_model_name="AMD EPYC")):
        loaded = load_baselines(tmp_path, fingerprint=fingerprint)
        assert loaded.profile is None
        (note,) = loaded.notes
        assert f"  cpu-2core.yaml: {baselines.FORMAT_1_NOTE}" in note.splitlines()
    assert baselines.FORMAT_1_NOTE.startswith("not applicable: recorded in format 1")
    assert "re-record it (README: Recording a baseline on a new machine)" in baselines.FORMAT_1_NOTE


def test_load_profile_and_recording_refuse_a_format_1_file(tmp_path):
    path = write(tmp_path / "cpu-2core.yaml", FORMAT_1)
    before = path.read_bytes()
    with pytest.raises(BaselineError) as error:
        load_profile(path)
    assert (error.value.path, error.value.key) == (str(path), "format")
    assert baselines.FORMAT_1_NOTE in error.value.problem
    with pytest.raises(BaselineError, match="format"):
        record(path, metrics={"samples_per_s": 100.0})
    assert path.read_bytes() == before


def test_recording_writes_format_2_with_the_whole_fingerprint(tmp_path):
    path = tmp_path / "gpu-h200.yaml"
    record(path, metrics={"samples_per_s": 100.0}, fingerprint=GPU)
    document = yaml.safe_load(path.read_text())
    assert list(document)[:3] == ["format", "profile", "fingerprint"]
    assert document["format"] == baselines.PROFILE_FORMAT == 2
    assert document["fingerprint"] == GPU.as_dict()
    assert MachineFingerprint.from_dict(document["fingerprint"]) == GPU
    assert load_profile(path).fingerprint == GPU


def test_importing_baselines_does_not_import_tensorflow():
    code = "import sys, perfsuite.verdict.baselines; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60, check=False).returncode == 0


# --------------------------------------------------------------------------------------------------
# Malformed files: each error names the file, the key and the problem

VALID = f"""\
format: 2
profile: cpu-2core
fingerprint:
  cpu_vendor: Intel
  cpu_family: 6
  cpu_model_number: 85
  cpu_stepping: 7
  cpu_model_name: "Intel(R) Xeon(R) CPU @ 2.20GHz"
  isa: [avx, avx2, avx512f, fma, sse4_2]
  cores: 2
  l2_cache_kib: 1024
  l3_cache_kib: 39424
  memory_gib: 7.8
  tensorflow: "2.21.0"
  tensorflow_cuda: null
  tensorflow_cudnn: null
  onednn: true
  gpu_model: null
  gpu_driver: null
  gpu_cuda_driver: null
  gpu_power_limit_w: null
margin: 0.25
benchmarks:
  "{BENCH}":
    min_samples_per_s: 900.0
    max_input_bound: 0.05
"""
END = len(VALID.splitlines()) + 1  # the line after the last: where an unterminated value is found
QUOTED = f'benchmarks."{BENCH}"'


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        (VALID.replace("max_input_bound: 0.05", "max_input_bound: [0.05"), f"line {END}, column 1",
         "invalid YAML"),
        ("- a\n- b\n", "(top level)", "expected a mapping, found list ['a', 'b']"),
        ("", "(top level)", "expected a mapping, found an empty document"),
        (VALID.replace("profile: cpu-2core", "profile: gpu-h200"), "profile",
         "expected the file's name without .yaml ('cpu-2core'), found 'gpu-h200'"),
        (VALID.replace("margin: 0.25", "thresholds: {}"), "thresholds",
         "expected one of the keys format, profile, fingerprint, margin, recorded, benchmarks, found an unknown key"),
        (VALID.replace("fingerprint:", "fingerprint_:"), "fingerprint_", "found an unknown key"),
        (VALID.replace("margin: 0.25", "margin: 25"), "margin",
         "expected a margin in [0, 1), found float 25.0"),
        (VALID.split("fingerprint:")[0] + "margin:" + VALID.split("margin:")[1], "fingerprint",
         "expected a value (required key), found no such key"),
        (VALID.replace("  gpu_driver: null\n", ""), "fingerprint.gpu_driver",
         "expected a value (required key), found no such key"),
        (VALID.replace("cores: 2", "cores: two"), "fingerprint.cores",
         "expected a positive integer, found str 'two'"),
        (VALID.replace('tensorflow: "2.21.0"', "tensorflow: 2.20"), "fingerprint.tensorflow",
         "(quote numbers: '2.21'), found float 2.2"),
        (VALID.replace("cpu_model_name:", "cpu_model:"), "fingerprint.cpu_model",
         "expected one of cpu_vendor, cpu_family"),
        (VALID.replace("isa: [avx, avx2, avx512f, fma, sse4_2]", "isa: avx2"), "fingerprint.isa",
         "expected a list of feature names, found str 'avx2'"),
        (VALID.replace("format: 2", "format: 3"), "format",
         "expected 2 (the profile format this perfsuite reads), found int 3"),
        (VALID.replace("format: 2", "format: '2'"), "format",
         "expected 2 (the profile format this perfsuite reads), found str '2'"),
        (VALID.split("benchmarks:")[0] + "benchmarks:\n  - x\n", "benchmarks",
         "expected an object, found list"),
        (VALID.split("benchmarks:")[0], "benchmarks", "expected a value (required key), found no such key"),
        (VALID.split("benchmarks:")[0] + f'benchmarks:\n  "{BENCH}":\n', QUOTED,
         "expected an object, found null"),
        (VALID.replace("min_samples_per_s", "avg_samples_per_s"), f"{QUOTED}.avg_samples_per_s",
         "expected min_<metric> or max_<metric>, found an unknown threshold key"),
        (VALID.replace("900.0", "fast"), f"{QUOTED}.min_samples_per_s", "expected float, found str 'fast'"),
        (VALID.replace("900.0", ".nan"), f"{QUOTED}.min_samples_per_s",
         "expected a finite number, found float nan"),
        (VALID.replace("900.0", "true"), f"{QUOTED}.min_samples_per_s", "expected float, found bool True"),
        (VALID.replace("max_input_bound: 0.05", "max_samples_per_s: 800"), QUOTED,
         "expected min ≤ max for 'samples_per_s', found min 900.0 above max 800.0: no value could pass"),
        (VALID + f'  "{BENCH}":\n    min_samples_per_s: 1.0\n', f"line {END}, column 3", "found duplicate key"),
        (VALID.replace("profile: cpu-2core", "profile: ' '"), "profile", "expected a non-empty string, found str ' '"),
        (VALID.replace("margin: 0.25", "margin: 0.25\nrecorded: 5"), "recorded", "expected str, found int 5"),
    ],
    ids=["yaml-syntax", "top-list", "empty", "profile-name", "unknown-top-key", "misspelt-key",
         "margin-range", "no-fingerprint", "no-driver", "cores-type", "tf-unquoted", "format-1-key", "isa-str",
         "format-3", "format-str",
         "benchmarks-list", "no-benchmarks", "entry-null", "threshold-key", "threshold-str", "threshold-nan",
         "threshold-bool", "min-above-max", "duplicate-id", "profile-blank", "recorded-int"],
)
def test_malformed_profile_names_file_key_and_problem(tmp_path, text, key, problem):
    path = write(tmp_path / "cpu-2core.yaml", text)
    with pytest.raises(BaselineError) as error:
        load_profile(path)
    assert (error.value.path, error.value.key) == (str(path), key)
    assert problem in error.value.problem
    assert str(error.value).startswith(f"{path}: {key}: ")


def test_valid_profile_loads(tmp_path):
    profile = load_profile(write(tmp_path / "cpu-2core.yaml", VALID + "recorded: 2024-01-02 03:04:05\n"))
    assert (profile.name, profile.fingerprint, profile.margin) == ("cpu-2core", CPU, 0.25)
    assert profile.recorded == "2024-01-02T03:04:05"  # an unquoted YAML timestamp is read as its text
    assert [(t.key, t.value) for t in profile.benchmarks[BENCH]] == [
        ("min_samples_per_s", 900.0), ("max_input_bound", 0.05)]


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("{}\n", "ratios", "expected a value (required key), found no such key"),
        ("ratios: [1]\n", "ratios", "expected an object, found list [1]"),
        ("ratios:\n  x_ratio: {minimum: 6}\n", "ratios.x_ratio.minimum",
         "expected one of the keys min, max, claim, role, found an unknown key"),
        ("ratios:\n  x_ratio: {claim: c}\n", "ratios.x_ratio", "expected at least one of min, max, found neither"),
        ("ratios:\n  x_ratio: {min: six, claim: c}\n", "ratios.x_ratio.min",
         "expected float, found str 'six'"),
        ("ratios:\n  x_ratio: {min: 2, max: 1, claim: c}\n", "ratios.x_ratio", "no value could pass"),
        ("ratios:\n  1.5: {min: 2}\n", "ratios", "expected string keys, found float 1.5"),
        ("ratios:\n  x_ratio: {max: .inf, claim: c}\n", "ratios.x_ratio.max", "expected a finite number, found float inf"),
        ("ratios:\n  x_ratio: {min: 2, claim: ''}\n", "ratios.x_ratio.claim", "expected a non-empty string"),
        ("ratios:\n  x_ratio: {min: 2, claim: c, role: info}\n", "ratios.x_ratio.role",
         "expected one of regression, context, found str 'info'"),
    ],
)
def test_malformed_ratios_name_file_key_and_problem(tmp_path, text, key, problem):
    path = write(tmp_path / "ratios.yaml", text)
    with pytest.raises(BaselineError) as error:
        load_ratios(path)
    assert (error.value.path, error.value.key) == (str(path), key)
    assert problem in error.value.problem


def test_missing_file_is_named(tmp_path):
    with pytest.raises(BaselineError) as error:
        load_profile(tmp_path / "cpu-2core.yaml")
    assert error.value.path == str(tmp_path / "cpu-2core.yaml") and "no such file" in error.value.problem


# --------------------------------------------------------------------------------------------------
# Concurrent writers and crashes

WRITER = """\
import json, sys, time
from pathlib import Path
from perfsuite.measure.machine import MachineFingerprint
from perfsuite.verdict.baselines import record_measurements
path, worker, rounds, go = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
fingerprint = MachineFingerprint.from_dict(json.loads(sys.argv[5]))
while not go.exists():  # start together, so the writers really contend
    time.sleep(0.001)
for r in range(rounds):
    record_measurements(path, profile_name=path.stem, fingerprint=fingerprint,
                        benchmark_id=f"bench[w{worker}-r{r}]",
                        metrics={"samples_per_s": 100.0 * worker + r + 1}, margin=0.25)
"""


def test_concurrent_writers_lose_nothing_and_the_file_is_always_valid(tmp_path):
    workers, rounds = 8, 6
    path = tmp_path / "cpu-2core.yaml"
    record(path, benchmark_id="seed", metrics={"samples_per_s": 1.0})
    go = tmp_path / "go"
    processes = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), str(rounds), str(go),
                          json.dumps(CPU.as_dict())])
        for w in range(workers)
    ]
    reads, errors, done = [], [], threading.Event()

    def read_while_writing():
        while not done.is_set():
            try:  # readers take no lock: the atomic replace alone must keep every read whole
                reads.append(len(load_profile(path).benchmarks))
            except Exception as error:  # noqa: BLE001 -- collected and asserted on below
                errors.append(error)

    reader = threading.Thread(target=read_while_writing)
    reader.start()
    go.touch()
    try:
        codes = [p.wait(timeout=120) for p in processes]
    finally:
        done.set()
        reader.join()
    assert codes == [0] * workers
    assert errors == []
    assert reads and max(reads) <= workers * rounds + 1

    benchmarks = load_profile(path).benchmarks
    expected = {f"bench[w{w}-r{r}]": 100.0 * w + r + 1 for w in range(workers) for r in range(rounds)}
    assert set(benchmarks) == set(expected) | {"seed"}
    for benchmark_id, measured in expected.items():
        (threshold,) = benchmarks[benchmark_id]
        assert threshold.value == threshold_from_measurement(
            metric="samples_per_s", measured=measured, margin=0.25).value
    assert sorted(os.listdir(tmp_path)) == [".cpu-2core.yaml.lock", "cpu-2core.yaml", "go"]  # no temp files


def test_crash_mid_write_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "cpu-2core.yaml"
    record(path, metrics={"samples_per_s": 100.0})
    before = path.read_bytes()

    def dump_then_crash(document, stream):
        stream.write("benchmarks:\n  half-writ")
        raise RuntimeError("simulated crash mid-write")

    monkeypatch.setattr(baselines, "_dump_yaml", dump_then_crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        record(path, benchmark_id="other", metrics={"samples_per_s": 5.0})
    with pytest.raises(RuntimeError, match="simulated crash"):
        record(tmp_path / "cpu-new.yaml", metrics={"samples_per_s": 5.0})

    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [".cpu-2core.yaml.lock", ".cpu-new.yaml.lock", "cpu-2core.yaml"]
    monkeypatch.undo()
    record(path, benchmark_id="other", metrics={"samples_per_s": 5.0})  # the lock was released
    assert set(load_profile(path).benchmarks) == {BENCH, "other"}
