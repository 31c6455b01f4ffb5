"""The measuring harness checked against an independent one: perfsuite's measure_dataset and
tfds.benchmark's timing loop must agree within ±10 % (median ratio over interleaved rounds) on the
TF-native WAV and cache loaders and the raw read. The method is scripts/crosscheck_tfds.py's; see
docs/measurement.md. Needs the 'crosscheck' extra (tensorflow-datasets).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.selftest, pytest.mark.slow]  # minutes of runs: nightly (full profile) or on demand

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "crosscheck_tfds.py"


def _crosscheck():
    spec = importlib.util.spec_from_file_location("crosscheck_tfds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # AutoGraph looks its functions' module up there
    spec.loader.exec_module(module)
    return module


def test_perfsuite_agrees_with_tfds_benchmark(perfsuite_corpus, perfsuite_cache, capsys):
    pytest.importorskip("tensorflow_datasets",
                        reason="the cross-check needs the 'crosscheck' extra (tensorflow-datasets)")
    crosscheck = _crosscheck()
    datasets = crosscheck.pipelines(perfsuite_corpus, perfsuite_cache)
    overheads = {name: crosscheck.timing.harness_overhead(dataset) for name, dataset in datasets.items()}
    result, reported = crosscheck.schedule(datasets, rounds=9, warmup_batches=2, batches=256)
    with capsys.disabled():
        print()
        agrees = crosscheck.report(result, reported, overheads, tolerance=0.10)
    assert agrees, "perfsuite/tfds median ratio outside ±10 % for some pipeline (table above)"
