"""The loaders on the tiny corpus: batch structure, true lengths, zero padding, values, coverage and options.

Every loader is checked against references computed here: the numpy log-mel of each WAV and the
cached arrays. ``mel_len`` must be ``MelConfig.num_frames`` of the WAV's sample count (the padded
length counted as speech was a bug in the project this suite is modelled on), padding must be exact
zeros, and every id must arrive exactly once per epoch with its own data (never a dummy sample).
"""

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.data import text
from perfsuite.data.audio import MelConfig, log_mel_numpy
from perfsuite.data.corpus import cache_paths, read_metadata, wav_path
from perfsuite.data.loaders import AUTOTUNE, Loader, LoaderConfig, build_loader
from perfsuite.data.wav import inspect_wav, read_wav
from perfsuite.errors import DataError

MEL = MelConfig()
PAIRS = [("tf_native", "wav"), ("numpy_function", "wav"), ("tf_native", "cache"), ("numpy_function", "cache")]
HAVE_LIBROSA = all(importlib.util.find_spec(name) for name in ("librosa", "soundfile"))
LIBROSA = pytest.param(("librosa", "wav"), id="librosa-wav", marks=pytest.mark.skipif(
    not HAVE_LIBROSA, reason="librosa/soundfile not installed (pip install perfsuite[peers])"))
# A quarter of the profile's examples (6 in CI): each one builds and runs a pipeline.
PIPELINE_SETTINGS = settings(max_examples=max(1, settings.default.max_examples // 4))


@dataclass(frozen=True)
class Truth:
    wav_frames: int
    mel: np.ndarray  # numpy log-mel of the WAV (the reference definition)
    tokens: np.ndarray  # encoded normalized text
    cached_mel: np.ndarray
    cached_tokens: np.ndarray


@pytest.fixture(scope="module")
def truth(tiny_corpus, tiny_cache) -> dict[str, Truth]:
    result = {}
    for utt in read_metadata(tiny_corpus):
        path = wav_path(tiny_corpus, utt.id)
        mel_path, tokens_path = cache_paths(tiny_cache, utt.id)
        result[utt.id] = Truth(
            wav_frames=inspect_wav(path).num_frames,
            mel=log_mel_numpy(read_wav(path, sample_rate=MEL.sample_rate), MEL),
            tokens=text.encode(utt.normalized_text),
            cached_mel=np.load(mel_path),
            cached_tokens=np.load(tokens_path),
        )
    return result


@dataclass(frozen=True)
class Sample:
    mel: np.ndarray  # [:mel_len]
    tokens: np.ndarray  # [:text_len]
    batch: int


def epoch(loader: Loader, *, n_mels: int = 80):
    """Run one epoch; check each batch's structure and padding; return (samples by id, batch shapes)."""
    samples, shapes = {}, []
    for index, batch in enumerate(loader.dataset):
        b = {key: value.numpy() for key, value in batch.items()}
        size = len(b["id"])
        assert b["mel"].dtype == np.float32 and b["tokens"].dtype == np.int32
        assert b["mel_len"].dtype == np.int32 and b["text_len"].dtype == np.int32
        assert b["mel"].ndim == 3 and b["mel"].shape[0] == size and b["mel"].shape[2] == n_mels
        assert b["tokens"].ndim == 2 and b["tokens"].shape[0] == size
        assert b["mel_len"].shape == b["text_len"].shape == (size,)
        shapes.append((b["tokens"].shape, b["mel"].shape))
        for i in range(size):
            utt_id = b["id"][i].decode()
            assert utt_id not in samples, f"{utt_id} twice in one epoch"
            mel_len, text_len = int(b["mel_len"][i]), int(b["text_len"][i])
            assert np.all(b["mel"][i, mel_len:] == 0), f"{utt_id}: mel padding is not zero"
            assert np.all(b["tokens"][i, text_len:] == 0), f"{utt_id}: token padding is not zero"
            assert np.all(b["tokens"][i, :text_len] != text.PAD_ID)  # text_len counts no padding
            samples[utt_id] = Sample(mel=b["mel"][i, :mel_len], tokens=b["tokens"][i, :text_len], batch=index)
    return samples, shapes


def assert_matches_truth(samples, truth, *, source, atol, max_mel_frames=None, max_text_len=None):
    """Every id once, with true (possibly truncated) lengths and the reference values."""
    assert sorted(samples) == sorted(truth)
    for utt_id, sample in samples.items():
        ref = truth[utt_id]
        mel, tokens = (ref.cached_mel, ref.cached_tokens) if source == "cache" else (ref.mel, ref.tokens)
        frames = MEL.num_frames(ref.wav_frames)
        assert mel.shape[0] == frames
        assert sample.mel.shape[0] == min(frames, max_mel_frames or frames), utt_id  # never the padded length
        assert sample.tokens.shape[0] == min(len(tokens), max_text_len or len(tokens)), utt_id
        np.testing.assert_array_equal(sample.tokens, tokens[: sample.tokens.shape[0]])
        expected = mel[: sample.mel.shape[0]]
        if atol == 0:
            np.testing.assert_array_equal(sample.mel, expected, err_msg=utt_id)
        else:
            np.testing.assert_allclose(sample.mel, expected, atol=atol, rtol=0, err_msg=utt_id)


def assert_all_distinct(samples):
    digests = {hashlib.sha256(s.mel.tobytes()).hexdigest() for s in samples.values()}
    assert len(digests) == len(samples), "two ids gave the same mel (a dummy sample?)"


# Exact for the cache (the same bytes) and for numpy_function x wav (the same numpy code as the
# reference); 1e-4 for the TF mel, the definition's tolerance.
TOLERANCE = {("tf_native", "wav"): 1e-4, ("numpy_function", "wav"): 0,
             ("tf_native", "cache"): 0, ("numpy_function", "cache"): 0}


@pytest.mark.parametrize(("kind", "source"), PAIRS, ids=[f"{k}-{s}" for k, s in PAIRS])
def test_loader_yields_every_sample_with_true_lengths_and_values(tiny_corpus, tiny_cache, truth, kind, source):
    loader = build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(kind=kind, source=source, batch_size=5))
    assert loader.num_samples == len(truth) and loader.skipped == () and loader.skipped_count == 0
    samples, shapes = epoch(loader)
    assert_matches_truth(samples, truth, source=source, atol=TOLERANCE[(kind, source)])
    assert_all_distinct(samples)
    assert [s[1][0] for s in shapes] == [5, 5, 5, 5, 4]
    # Dynamic padding pads to the longest sample of each batch, and shorter ones are really shorter.
    for index, (tokens_shape, mel_shape) in enumerate(shapes):
        in_batch = [s for s in samples.values() if s.batch == index]
        assert mel_shape[1] == max(s.mel.shape[0] for s in in_batch)
        assert tokens_shape[1] == max(s.tokens.shape[0] for s in in_batch)
    assert any(s.mel.shape[0] < shapes[s.batch][1][1] for s in samples.values())


@pytest.mark.parametrize("pair", [LIBROSA])
def test_librosa_peer_yields_every_sample(tiny_corpus, truth, pair):
    kind, source = pair
    loader = build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(kind=kind, source=source, batch_size=5))
    samples, _ = epoch(loader)
    assert sorted(samples) == sorted(truth)
    assert_all_distinct(samples)
    for utt_id, sample in samples.items():  # librosa's centred framing: 1 + n // hop frames
        assert sample.mel.shape[0] == 1 + truth[utt_id].wav_frames // MEL.hop_length
        np.testing.assert_array_equal(sample.tokens, truth[utt_id].tokens)


@pytest.mark.parametrize("source", ["wav", "cache"])
def test_headers_read_at_preflight_or_in_the_graph_give_identical_batches(tiny_corpus, tiny_cache, source):
    """decode_raw after the layout check equals tf.audio.decode_wav / the TF .npy parser, bit for bit."""
    def batches(decode):
        config = LoaderConfig(source=source, batch_size=7, decode=decode)
        return [{k: v.numpy() for k, v in b.items()} for b in build_loader(dataset_dir=tiny_corpus, config=config).dataset]

    preflight, in_graph = batches("preflight"), batches("in_graph")
    assert len(preflight) == len(in_graph) == 4
    for a, b in zip(preflight, in_graph):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_map_extra_runs_in_the_map_and_the_planted_slowdown_leaves_the_data_as_they_are(tiny_corpus):
    from perfsuite.tools.selftest import planted_slowdown

    def mels(map_extra):
        loader = build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(batch_size=7), map_extra=map_extra)
        return [b["mel"].numpy() for b in loader.dataset]

    plain = mels(None)
    for doubled, mel in zip(mels(lambda mel, element: 2.0 * mel), plain, strict=True):
        np.testing.assert_array_equal(doubled, 2.0 * mel)
    for planted, mel in zip(mels(planted_slowdown(0.25, MelConfig())), plain, strict=True):
        np.testing.assert_array_equal(planted, mel)


def test_tf_native_and_numpy_function_agree_per_id(tiny_corpus, tiny_cache):
    for source in ("wav", "cache"):
        native, _ = epoch(build_loader(dataset_dir=tiny_corpus,
                                       config=LoaderConfig(kind="tf_native", source=source, batch_size=8)))
        numpy, _ = epoch(build_loader(dataset_dir=tiny_corpus,
                                      config=LoaderConfig(kind="numpy_function", source=source, batch_size=8)))
        assert native.keys() == numpy.keys()
        for utt_id in native:
            assert native[utt_id].mel.shape == numpy[utt_id].mel.shape
            np.testing.assert_allclose(native[utt_id].mel, numpy[utt_id].mel, atol=1e-4, rtol=0)
            np.testing.assert_array_equal(native[utt_id].tokens, numpy[utt_id].tokens)


def test_the_numpy_function_cache_loader_reads_again_on_cpython_311s_spurious_ast_error(tiny_corpus, tiny_cache,
                                                                                       monkeypatch):
    """np.load's header parse (ast.literal_eval) on two tf.data threads at once can fail under CPython 3.11
    ("AST constructor recursion depth mismatch", seen in CI): planted on every other np.load, the loader reads
    the same epoch as the TF-native one."""
    from perfsuite.data.npy import SPURIOUS_AST_ERROR

    native, _ = epoch(build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(kind="tf_native", source="cache")))
    calls, load = [], np.load

    def flaky(path, *args, **kwargs):
        calls.append(path)
        if len(calls) % 2:
            raise SystemError(f"{SPURIOUS_AST_ERROR} (before=27, after=22)")
        return load(path, *args, **kwargs)

    loader = build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(kind="numpy_function", source="cache",
                                                                       num_parallel_calls=2))
    with monkeypatch.context() as patched:
        patched.setattr(np, "load", flaky)
        read, _ = epoch(loader)
    assert read.keys() == native.keys() and len(calls) >= 2 * 2 * len(native)  # mel and tokens, each twice
    for utt_id, sample in native.items():
        np.testing.assert_array_equal(read[utt_id].mel, sample.mel)


@PIPELINE_SETTINGS
@given(pair=st.sampled_from(PAIRS), batch_size=st.integers(1, 9), max_mel_frames=st.integers(1, 140),
       max_text_len=st.integers(1, 25), drop_remainder=st.booleans())
def test_static_shapes_truncate_and_keep_true_lengths(tiny_corpus, tiny_cache, truth, pair, batch_size,
                                                      max_mel_frames, max_text_len, drop_remainder):
    kind, source = pair
    config = LoaderConfig(kind=kind, source=source, batch_size=batch_size, static_shapes=True,
                          max_mel_frames=max_mel_frames, max_text_len=max_text_len, overlong="truncate",
                          drop_remainder=drop_remainder)
    loader = build_loader(dataset_dir=tiny_corpus, config=config)
    samples, shapes = epoch(loader)
    full_batches = len(truth) // batch_size
    expected_batches = full_batches if drop_remainder else -(-len(truth) // batch_size)
    sizes = [batch_size] * full_batches + [len(truth) % batch_size] * (expected_batches - full_batches)
    assert shapes == [((size, max_text_len), (size, max_mel_frames, 80)) for size in sizes]
    if drop_remainder:
        assert len(samples) == full_batches * batch_size
        truth = {utt_id: truth[utt_id] for utt_id in samples}
    assert_matches_truth(samples, truth, source=source, atol=TOLERANCE[pair],
                         max_mel_frames=max_mel_frames, max_text_len=max_text_len)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize(("kind", "source"), [("tf_native", "wav"), ("numpy_function", "cache")])
def test_static_shapes_reject_overlong_samples(tiny_corpus, tiny_cache, truth, kind, source, on_error):
    frames = {utt_id: MEL.num_frames(t.wav_frames) for utt_id, t in truth.items()}
    limit = int(np.median(list(frames.values())))
    overlong = sorted(utt_id for utt_id, n in frames.items() if n > limit)
    config = LoaderConfig(kind=kind, source=source, batch_size=4, static_shapes=True, max_mel_frames=limit,
                          max_text_len=100, overlong="reject", on_error=on_error)
    if on_error == "raise":
        with pytest.raises(DataError) as error:
            build_loader(dataset_dir=tiny_corpus, config=config)
        assert any(f"{utt_id}." in error.value.path for utt_id in overlong)
        assert f"≤ {limit} mel frames" in error.value.expected and "mel frames" in error.value.found
        return
    loader = build_loader(dataset_dir=tiny_corpus, config=config)
    assert sorted(Path(s.path).stem for s in loader.skipped) == overlong
    assert all(f"≤ {limit} mel frames" in s.reason for s in loader.skipped)
    assert loader.num_samples == len(truth) - len(overlong)
    samples, shapes = epoch(loader)
    assert all(shape[1][1:] == (limit, 80) for shape in shapes)
    kept = {utt_id: t for utt_id, t in truth.items() if utt_id not in overlong}
    assert_matches_truth(samples, kept, source=source, atol=TOLERANCE[(kind, source)])  # nothing truncated


@PIPELINE_SETTINGS
@given(pair=st.sampled_from(PAIRS), batch_size=st.integers(1, 7), seed=st.integers(0, 2**31 - 1),
       workers=st.sampled_from([1, 2, AUTOTUNE]))
def test_nondeterministic_shuffled_epochs_lose_and_duplicate_nothing(tiny_corpus, tiny_cache, truth, pair,
                                                                   batch_size, seed, workers):
    kind, source = pair
    config = LoaderConfig(kind=kind, source=source, batch_size=batch_size, deterministic=False,
                          shuffle_seed=seed, num_parallel_calls=workers)
    loader = build_loader(dataset_dir=tiny_corpus, config=config)
    for _ in range(2):  # reshuffled each epoch; each epoch complete
        samples, _ = epoch(loader)
        assert_matches_truth(samples, truth, source=source, atol=TOLERANCE[pair])


def _order(loader):
    return [utt_id.decode() for batch in loader.dataset for utt_id in batch["id"].numpy()]


def test_shuffle_is_seeded_and_reshuffles_each_epoch(tiny_corpus, tiny_cache, truth):
    def loader(seed):
        return build_loader(dataset_dir=tiny_corpus,
                            config=LoaderConfig(kind="tf_native", source="cache", batch_size=4, shuffle_seed=seed))

    file_order = [u.id for u in read_metadata(tiny_corpus)]
    assert _order(build_loader(dataset_dir=tiny_corpus,
                               config=LoaderConfig(kind="tf_native", source="cache", batch_size=4))) == file_order
    first = loader(3)
    epoch_1, epoch_2 = _order(first), _order(first)
    assert sorted(epoch_1) == sorted(epoch_2) == sorted(file_order)
    assert epoch_1 != file_order and epoch_2 != epoch_1
    assert _order(loader(3)) == epoch_1 and _order(loader(4)) != epoch_1


@pytest.mark.parametrize(("kind", "source"), [("tf_native", "wav"), ("numpy_function", "cache")])
def test_bucketing_yields_every_id_once_in_length_buckets(tiny_corpus, tiny_cache, truth, kind, source):
    boundaries = (40, 80)
    config = LoaderConfig(kind=kind, source=source, batch_size=3, bucket_boundaries=boundaries)
    samples, shapes = epoch(build_loader(dataset_dir=tiny_corpus, config=config))
    assert_matches_truth(samples, truth, source=source, atol=TOLERANCE[(kind, source)])
    assert all(shape[1][0] <= 3 for shape in shapes)
    for index in range(len(shapes)):
        buckets = {int(np.searchsorted(boundaries, s.mel.shape[0], side="right"))
                   for s in samples.values() if s.batch == index}
        assert len(buckets) == 1, f"batch {index} mixes length buckets"


@pytest.mark.parametrize("prefetch", [0, 1, AUTOTUNE])
def test_prefetch_depths(tiny_corpus, tiny_cache, truth, prefetch):
    config = LoaderConfig(kind="tf_native", source="cache", batch_size=8, prefetch=prefetch)
    samples, _ = epoch(build_loader(dataset_dir=tiny_corpus, config=config))
    assert_matches_truth(samples, truth, source="cache", atol=0)


@pytest.mark.parametrize(("kind", "source"), [("tf_native", "wav"), ("tf_native", "cache")])
def test_prefetch_to_device_is_the_last_transformation(tiny_corpus, tiny_cache, truth, kind, source):
    config = LoaderConfig(kind=kind, source=source, batch_size=8, prefetch_to_device="/cpu:0")
    loader = build_loader(dataset_dir=tiny_corpus, config=config)
    # prefetch_to_device is copy_to_device + prefetch; nothing may follow it (a private attribute, but
    # the only way to see the pipeline's order without running it).
    assert type(loader.dataset._input_dataset).__name__ == "_CopyToDeviceDataset"
    samples, _ = epoch(loader)
    assert_matches_truth(samples, truth, source=source, atol=TOLERANCE[(kind, source)])


def test_the_configured_sample_rate_is_the_one_loaded(tmp_path):
    from perfsuite.data.corpus import CorpusSpec, build_cache, build_corpus

    directory = build_corpus(CorpusSpec(num_utterances=3, sample_rate=16000, min_seconds=0.3, max_seconds=0.5,
                                        seed=5), root=tmp_path)
    mel_config = MelConfig(sample_rate=16000)
    build_cache(directory, mel_config=mel_config)
    for kind, source in PAIRS:
        loader = build_loader(dataset_dir=directory, config=LoaderConfig(kind=kind, source=source, batch_size=2),
                              mel_config=mel_config)
        samples, _ = epoch(loader)
        for utt in read_metadata(directory):
            audio = read_wav(wav_path(directory, utt.id), sample_rate=16000)
            np.testing.assert_allclose(samples[utt.id].mel, log_mel_numpy(audio, mel_config), atol=1e-4, rtol=0)
    with pytest.raises(DataError, match="expected a sample rate of 22050 Hz, found 16000 Hz"):
        build_loader(dataset_dir=directory, config=LoaderConfig(kind="tf_native", source="wav"))


def test_cache_source_without_a_cache_is_one_clear_error(tmp_path, tiny_corpus):
    with pytest.raises(DataError, match="expected a cache directory.*found no such directory"):
        build_loader(dataset_dir=tiny_corpus, config=LoaderConfig(source="cache"), cache_dir=tmp_path / "none")


@pytest.mark.parametrize(("change", "field"), [
    ({"kind": "torch"}, "kind"), ({"source": "mp3"}, "source"), ({"kind": "librosa", "source": "cache"}, "source"),
    ({"batch_size": 0}, "batch_size"), ({"num_parallel_calls": 0}, "num_parallel_calls"),
    ({"overlong": "drop"}, "overlong"), ({"on_error": "ignore"}, "on_error"), ({"prefetch": -2}, "prefetch"),
    ({"static_shapes": True, "max_text_len": 10}, "max_text_len/max_mel_frames"),
    ({"max_mel_frames": 0}, "max_mel_frames"), ({"max_mel_frames": 100}, "max_text_len/max_mel_frames"), ({"bucket_boundaries": (80, 40)}, "bucket_boundaries"),
    ({"bucket_boundaries": (0, 40)}, "bucket_boundaries"),
    ({"decode": "lazy"}, "decode"), ({"kind": "numpy_function", "decode": "in_graph"}, "decode"),
    ({"static_shapes": True, "max_text_len": 9, "max_mel_frames": 9, "bucket_boundaries": (4,)},
     "bucket_boundaries"),
])
def test_config_rejects_bad_options(change, field):
    with pytest.raises(ValueError, match=rf"LoaderConfig\.{field}: expected .*, found "):
        LoaderConfig(**change)


def test_config_id_is_short_and_stable():
    assert LoaderConfig(kind="tf_native", source="wav", batch_size=16, num_parallel_calls=2).id == \
        "tf_native-wav-bs16-w2"
    assert LoaderConfig(source="cache", num_parallel_calls=AUTOTUNE).id == "tf_native-cache-bs16-wauto"
    assert LoaderConfig(decode="in_graph").id == "tf_native-wav-bs16-w2-in_graph"
