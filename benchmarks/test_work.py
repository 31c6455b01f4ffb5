"""The work each loader and step does, fingerprinted from its graph and compared with its snapshot.

Deterministic: no time and nothing of the machine (perfsuite.measure.work), so a change of work fails
here on any machine, in seconds, where a timing would need the change to outgrow its noise. Snapshots
live in benchmarks/baselines/work/, one reviewable YAML file per fingerprint (pytest-regressions).
How it decides: perfsuite.verdict.work (figures within ±0.5 %, structure and op histogram exactly).

Accept an intended change (rewrites the snapshots, which then show in the pull request's diff), in the
profile that failed (the step snapshots are per profile's model):

    python -m pytest benchmarks/test_work.py --perfsuite-profile=<profile> --force-regen

Snapshots are keyed by TensorFlow's and numpy's major.minor: against another version the structure decides,
the figures are reported, and one note names that command.

Reference shapes, the same in every profile: the loaders of test_loaders.py at its ratio configuration
(batch 16, 2 workers) over the seeded 'tiny' corpus (their maps and Python bodies run on 8 of its
utterances, per audio second from their mel frames); the steps of test_step.py (eager, graph, XLA at fp32,
XLA at mixed_float16) at batch 8, 80 tokens, 400 mel frames, of the profile's model (smoke: 'tiny'; quick and
full: 'default'), traced on test_step's synthetic batch and on the first batch of the TF-native cache
loader over the same corpus padded to those shapes (test_pipeline's loader for a step), the graph step also
run on it: a step that retraces on it shows as more than one trace. Each step's tf.function is also traced
on a synthetic batch of half the tokens and frames: a dropped input signature shows as two shape traces.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from perfsuite.data.audio import MelConfig
from perfsuite.data.corpus import PRESETS, build_cache, build_corpus, read_metadata, wav_path
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.data.wav import inspect_wav
from perfsuite.files import write_atomic
from perfsuite.measure.work import WorkFingerprint, dataset_work, mel_seconds, step_work
from perfsuite.pytest_plugin.summary import record_work_verdict
from perfsuite.verdict.work import SnapshotUnreadable, compare_work, read_snapshot
from perfsuite.workload.model import make_synthetic_batch

pytest.importorskip("pytest_regressions", reason="the work snapshots need pytest-regressions (the 'test' extra)")

SNAPSHOTS = Path(__file__).parent / "baselines" / "work"
REFERENCE_CORPUS = "tiny"
REFERENCE_BATCHES = 1  # loader batches each step is traced (graph: run) on, beside test_step's synthetic batch
WORK_OUT = "PERFSUITE_WORK_OUT"  # perfsuite.tools.ab.work.OUT_VARIABLE (benchmarks import no tools)


def _sibling(name: str):
    """A benchmark module beside this one, loaded by path (the suite imports with --import-mode=importlib)."""
    spec = importlib.util.spec_from_file_location(f"_work_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# perfsuite ab's timed workers leave them out: ab runs this file once per side before any timing, and
# diffs the two revisions' fingerprints (perfsuite.tools.ab.work)
pytestmark = pytest.mark.skipif(bool(os.environ.get("PERFSUITE_AB_SIDE")),
                                reason="perfsuite ab diffs the work fingerprints before its timed rounds")

loaders = _sibling("test_loaders")
steps = _sibling("test_step")
SHAPE = {"batch_size": loaders.RATIO_BATCH, "workers": loaders.RATIO_WORKERS}
LOADERS = [f"{k}-{s}" for k, s in loaders.PAIRS] + ["tf_native-wav-in_graph", "tf_native-cache-in_graph",
                                                     "tf_native-cache-bucketed", "raw_read", "compute_ceiling"]


@pytest.fixture(scope="session")
def work_corpus(pytestconfig) -> tuple[Path, Path]:
    corpus = build_corpus(PRESETS[REFERENCE_CORPUS], root=pytestconfig.getoption("perfsuite_data_dir"))
    return corpus, build_cache(corpus)


def _bucket_boundaries(corpus: Path) -> tuple[int, ...]:
    """test_bucketing_padding's boundaries: the octiles of the corpus's mel lengths."""
    frames = sorted(MelConfig().num_frames(inspect_wav(wav_path(corpus, u.id)).num_frames)
                    for u in read_metadata(corpus))
    return tuple(sorted({frames[len(frames) * q // 8] for q in range(1, 8)}))


def loader_dataset(tf, corpus: Path, cache: Path, loader: str):
    """The dataset test_loaders.py measures under this name, and the name its timed benchmark carries."""
    if loader == "raw_read":
        return loaders._raw_read_dataset(tf, corpus, cache, **SHAPE), loader
    if loader == "compute_ceiling":
        return loaders._compute_ceiling_dataset(tf, corpus, **SHAPE), loader
    kind, source, *variant = loader.split("-")
    options = {"decode": "in_graph"} if variant == ["in_graph"] else {}
    if variant == ["bucketed"]:
        options = {"bucket_boundaries": _bucket_boundaries(corpus)}
    dataset, name = loaders._loader_dataset(corpus, cache, kind=kind, source=source, **SHAPE, **options)
    return dataset, name + ("-bucketed" if variant == ["bucketed"] else "")


def accept_command(config) -> str:
    """The command that re-records the snapshots of this run's profile."""
    profile = config.getoption("perfsuite_profile")
    return f"python -m pytest benchmarks/test_work.py --perfsuite-profile={profile} --force-regen"


def check_snapshot(request, data_regression, fingerprint: WorkFingerprint, path: Path) -> None:
    """Compare with the snapshot (tolerance and versions: perfsuite.verdict.work), or write it where there
    is none or --force-regen / --regen-all asks (pytest-regressions)."""
    config = request.config
    accept = accept_command(config)
    out = os.environ.get(WORK_OUT)  # perfsuite ab: this revision's fingerprints, diffed with the other's
    if out:
        write_atomic(Path(out) / f"{path.stem}.json", json.dumps(fingerprint.snapshot(), sort_keys=True))
    regen = config.getoption("force_regen") or config.getoption("regen_all")
    if path.exists() and not regen:
        try:
            snapshot = read_snapshot(path, fingerprint.SCHEMA_VERSION, accept)
        except SnapshotUnreadable as error:
            pytest.fail(str(error), pytrace=False)
        verdict = compare_work(fingerprint.snapshot(), snapshot, rerecord=accept)
        record_work_verdict(config, verdict)
        if verdict.failed:
            pytest.fail(f"work changed (snapshot {path}):\n{verdict.message()}\n"
                        f"An intended change is accepted with: {accept}", pytrace=False)
        return
    data_regression.check(fingerprint.snapshot(), fullpath=path)


@pytest.mark.parametrize("loader", LOADERS)
def test_loader_work(request, data_regression, tensorflow, work_corpus, loader):
    dataset, name = loader_dataset(tensorflow, *work_corpus, loader)
    audio = mel_seconds(loaders.FRAME_S) if loader != "raw_read" else None
    fingerprint = dataset_work(dataset, name=name, audio_seconds=audio)
    assert fingerprint.structure["stages"], fingerprint
    check_snapshot(request, data_regression, fingerprint, SNAPSHOTS / f"loader-{name}.yml")


@pytest.fixture(scope="session")
def loader_batches(work_corpus) -> list:
    """The first batches of the TF-native cache loader at the steps' shapes (batch, tokens and frames padded
    to test_step's), as test_pipeline feeds a step."""
    config = LoaderConfig(kind="tf_native", source="cache", batch_size=steps.RATIO_BATCH, num_parallel_calls=1,
                          static_shapes=True, max_text_len=steps.TEXT_LEN, max_mel_frames=steps.MEL_FRAMES,
                          drop_remainder=True)
    corpus, cache = work_corpus
    loader = build_loader(dataset_dir=corpus, cache_dir=cache, config=config)
    return list(loader.dataset.take(REFERENCE_BATCHES))


@pytest.mark.parametrize("mode,step_precision", [("eager", "fp32"), ("graph", "fp32"), ("xla", "fp32"),
                                                 ("xla", "mixed_float16")],
                         ids=["eager", "graph", "xla", "xla-mixed_float16"])
def test_step_work(request, data_regression, perfsuite_profile, loader_batches, mode, step_precision):
    batch_size = steps.RATIO_BATCH
    train = steps._train_step(perfsuite_profile, mode=mode, batch_size=batch_size, precision=step_precision)
    name = f"{mode}-bs{batch_size}-{step_precision}"
    # run on the loader's batch in graph mode, where a retrace the trace cache hides (the step's own Python)
    # shows; the XLA steps share that Python and are traced on it (their first call's compile is the cost)
    # and traced on a batch of another shape, where a dropped input signature shows as a second trace
    other_shape = make_synthetic_batch(batch_size=batch_size, text_len=steps.TEXT_LEN // 2,
                                       mel_frames=steps.MEL_FRAMES // 2, seed=1)
    fingerprint = step_work(train, steps._batch(batch_size), name=name, batches=loader_batches,
                            run=mode == "graph", shapes=[other_shape])
    assert fingerprint.work["float_ops_per_step"] > 0 and fingerprint.structure["mode"] == mode, fingerprint
    check_snapshot(request, data_regression, fingerprint,
                   SNAPSHOTS / f"step-{perfsuite_profile.model}-{name}.yml")
