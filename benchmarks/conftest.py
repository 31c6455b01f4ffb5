"""Benchmark parametrization follows the run profile (--perfsuite-profile): quick sweeps less than full."""

from pathlib import Path

import pytest

from perfsuite.pytest_plugin.profiles import PROFILES

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="gpu", marks=pytest.mark.gpu)]


def pytest_report_header(config):
    """The run's first lines say when the work snapshots came from other TensorFlow or numpy versions."""
    from perfsuite.verdict.work import snapshots_versions

    versions = snapshots_versions(Path(__file__).parent / "baselines" / "work")
    if not versions:
        return None
    profile = config.getoption("perfsuite_profile")
    command = f"python -m pytest benchmarks/test_work.py --perfsuite-profile={profile} --force-regen"
    line = (f"perfsuite: the work snapshots were recorded with {versions}: their figures are judged, their exact "
            f"histograms reported, not failed; re-record them with: {command}")
    return [line]


@pytest.hookimpl(trylast=True)  # after @parametrize, so ids read kind-source-bs16-w2
def pytest_generate_tests(metafunc):
    profile = PROFILES[metafunc.config.getoption("perfsuite_profile")]
    if "batch_size" in metafunc.fixturenames:
        metafunc.parametrize("batch_size", profile.batch_sizes, ids=[f"bs{b}" for b in profile.batch_sizes])
    if "workers" in metafunc.fixturenames:
        ids = ["wauto" if w == -1 else f"w{w}" for w in profile.workers]
        metafunc.parametrize("workers", profile.workers, ids=ids)
    if "step_batch_size" in metafunc.fixturenames:
        sizes = profile.step_batch_sizes
        metafunc.parametrize("step_batch_size", sizes, ids=[f"bs{b}" for b in sizes])
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)
    if "precision" in metafunc.fixturenames:
        metafunc.parametrize("precision", profile.precisions, ids=["fp32" if p == "fp32" else "fp16" for p in profile.precisions])


@pytest.fixture(scope="session")
def tensorflow():
    from perfsuite._tensorflow import tensorflow

    tf = tensorflow()

    return tf


@pytest.fixture
def device_name(request, device):
    """The TensorFlow device of a case; a GPU case skips naming what is missing (GPU, NVML, TF's CUDA)."""
    return "/CPU:0" if device == "cpu" else request.getfixturevalue("gpu_device")


@pytest.fixture
def gpu_device(tensorflow) -> str:
    """The first GPU's device name, or a skip that names what is missing."""
    from perfsuite.errors import GpuUnavailable
    from perfsuite.measure.gpu import visible_gpus

    try:
        visible_gpus()
    except GpuUnavailable as error:
        pytest.skip(f"GPU case: {error.reason}")
    if not tensorflow.config.list_physical_devices("GPU"):
        pytest.skip("GPU case: NVML sees a GPU but TensorFlow does not (a CPU-only TensorFlow build, or its "
                    "CUDA libraries are missing: install the 'gpu' extra)")
    return "/GPU:0"
