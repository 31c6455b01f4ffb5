"""The metrics registry: one declaration per metric, looked up instead of parsing names."""

import ast
from pathlib import Path

import pytest

from perfsuite.verdict import metrics
from perfsuite.verdict.metrics import HIGHER, LOWER, Metric, UnknownMetric

PACKAGE = Path(metrics.__file__).parents[1]


def test_declared_directions_and_families():
    assert metrics.lookup("samples_per_s").better == HIGHER
    assert metrics.lookup("variation_ratio").better == LOWER  # declared, not the *_ratio family
    ratio = metrics.lookup("tf_native_over_librosa_wav_ratio")
    assert (ratio.better, ratio.same_run) == (HIGHER, True)
    share = metrics.lookup("tf_native_cache_input_bound")
    assert (share.better, share.same_run, share.threshold_kind) == (LOWER, True, "max")
    wait = metrics.lookup(metrics.wait_metric_of("tf_native_cache_input_bound"))
    assert (wait.name, wait.better, wait.same_run, wait.percent) == ("tf_native_cache_input_wait", LOWER, True, True)
    assert [metrics.wait_metric_of(name) for name in ("input_bound", "my_share")] == ["input_wait",
                                                                                       "my_share_input_wait"]
    assert metrics.recordable(["samples_per_s", "variation_ratio", "retraces"]) == ("samples_per_s", "retraces")


def test_an_undeclared_metric_is_refused_naming_the_registry():
    with pytest.raises(UnknownMetric, match="throughput.*perfsuite.verdict.metrics"):
        metrics.lookup("throughput")


def test_worse_follows_the_direction():
    assert metrics.lookup("samples_per_s").worse(-0.1) and not metrics.lookup("samples_per_s").worse(0.1)
    assert metrics.lookup("robust_cv").worse(0.1)


def test_register_accepts_a_new_metric_and_refuses_a_conflicting_one():
    mine = metrics.register(Metric("my_pipeline_frames_per_s", HIGHER, "frames/s", "a user's own figure"))
    assert metrics.lookup("my_pipeline_frames_per_s") is mine
    with pytest.raises(ValueError, match="already declared"):
        metrics.register(Metric("my_pipeline_frames_per_s", LOWER, "frames/s", "a user's own figure"))


def test_no_module_outside_the_registry_decides_a_metric_from_its_name():
    """The registry is the only place a metric's direction is written: no '_ratio' suffix tests and no
    'min'/'max' tables of metric names elsewhere in the package."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "endswith":
                args = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if any(isinstance(a, str) and a in ("_ratio", "ratio", "_input_bound") for a in args):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value == "ratio":
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
