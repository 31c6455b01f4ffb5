"""Loader throughput: kind × source × batch size × workers, the ceilings, and same-run ratios.

Ceilings measured on the same files:
- raw read: tf.io.read_file of the cache files each sample needs (mel and tokens), no decoding (the
  cache loader's ceiling);
- compute: the TF mel applied to audio already decoded in memory (the WAV loader's ceiling).
"""

import math

import pytest

from perfsuite.data.audio import MelConfig, log_mel_tf
from perfsuite.data.corpus import cache_paths, read_metadata, wav_path
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.data.wav import inspect_wav
from perfsuite.measure.teardown import iterate
from perfsuite.measure.timing import measure_dataset

PAIRS = [("tf_native", "wav"), ("numpy_function", "wav"), ("librosa", "wav"),
         ("tf_native", "cache"), ("numpy_function", "cache")]
RATIO_BATCH, RATIO_WORKERS = 16, 2  # the configuration the targets are stated for


FRAME_S = MelConfig().hop_length / MelConfig().sample_rate  # seconds of audio per mel frame


def _ratio_side(side: str, batch_size: int, workers: int) -> str | None:
    """The ratio side (a key of _ratio_sides) a plain benchmark measures at this shape, if any: under
    perfsuite ab the ratios then take its rounds instead of measuring that side again."""
    return side if (batch_size, workers) == (RATIO_BATCH, RATIO_WORKERS) else None


def _loader_dataset(corpus, cache, *, kind, source, batch_size, workers, decode="preflight", **options):
    if kind == "librosa":
        pytest.importorskip("librosa", reason="the librosa peer needs the 'peers' extra (librosa, soundfile)")
        pytest.importorskip("soundfile", reason="the librosa peer needs the 'peers' extra (librosa, soundfile)")
    config = LoaderConfig(kind=kind, source=source, batch_size=batch_size, num_parallel_calls=workers,
                          decode=decode, **options)
    return build_loader(dataset_dir=corpus, cache_dir=cache, config=config).dataset, config.id


def _raw_read_dataset(tf, corpus, cache, *, batch_size, workers):
    mels, tokens = zip(*(map(str, cache_paths(cache, utt.id)) for utt in read_metadata(corpus)))
    return (tf.data.Dataset.from_tensor_slices((list(mels), list(tokens)))
            .map(lambda mel, tok: (tf.io.read_file(mel), tf.io.read_file(tok)), num_parallel_calls=workers)
            .batch(batch_size).prefetch(tf.data.AUTOTUNE))


def _compute_ceiling_dataset(tf, corpus, *, batch_size, workers):
    """The TF mel over audio decoded once and held in memory: what the WAV loader could reach."""
    config = MelConfig()
    paths = [str(wav_path(corpus, utt.id)) for utt in read_metadata(corpus)]
    plain = tf.autograph.experimental.do_not_convert  # graph ops only: nothing for autograph to convert
    audio = (tf.data.Dataset.from_tensor_slices(paths)
             .map(plain(lambda p: tf.audio.decode_wav(tf.io.read_file(p), desired_channels=1).audio[:, 0]))
             .cache())
    audio.reduce(0, lambda count, _: count + 1)  # fill the in-memory cache before anything is timed
    return (audio.map(plain(lambda a: log_mel_tf(a, config)), num_parallel_calls=workers)
            .padded_batch(batch_size).prefetch(tf.data.AUTOTUNE))


@pytest.mark.parametrize("kind,source", PAIRS, ids=[f"{k}-{s}" for k, s in PAIRS])
def test_loader(perfsuite, perfsuite_corpus, perfsuite_cache, kind, source, batch_size, workers):
    dataset, name = _loader_dataset(perfsuite_corpus, perfsuite_cache, kind=kind, source=source,
                                    batch_size=batch_size, workers=workers)
    measurement = perfsuite.measure_dataset(dataset, name=name, frame_s=FRAME_S,
                                            side=_ratio_side(f"{kind}_{source}", batch_size, workers))
    assert measurement.samples_per_s > 0 and perfsuite.metrics["audio_s_per_s"] > 0


COLD = [("tf_native", "wav"), ("tf_native", "cache")]


def _files(corpus, cache, source):
    utterances = read_metadata(corpus)
    if source == "wav":
        return [wav_path(corpus, utt.id) for utt in utterances]
    return [path for utt in utterances for path in cache_paths(cache, utt.id)]


@pytest.mark.parametrize("kind,source", COLD, ids=[f"{k}-{s}" for k, s in COLD])
def test_cold_loader(perfsuite, perfsuite_corpus, perfsuite_cache, kind, source):
    """The loader with its files evicted from the page cache before every round: read as a dataset
    larger than memory would be (compare with test_loader's warm figure of the same loader)."""
    from perfsuite.data.page_cache import PageCacheUnavailable, evict, evict_or_fail

    files = _files(perfsuite_corpus, perfsuite_cache, source)
    try:
        evict_or_fail(files)
    except PageCacheUnavailable as error:
        pytest.skip(f"cold reads: {error}")
    dataset, name = _loader_dataset(perfsuite_corpus, perfsuite_cache, kind=kind, source=source,
                                    batch_size=RATIO_BATCH, workers=RATIO_WORKERS)
    evictions = []
    # The pipeline's prefetch threads may read files again between the eviction and its check: each
    # round's count of files still cached after eviction is recorded, so the figure says how cold it was.
    measurement = perfsuite.measure_dataset(dataset, name=f"cold-{name}", frame_s=FRAME_S,
                                            before_round=lambda: evictions.append(evict(files)))
    perfsuite.record({"evicted_files": len(files),
                      "still_cached_after_eviction": [len(e.still_cached) for e in evictions]}, prefix="cold_")
    assert measurement.samples_per_s > 0


def test_bucketing_padding(perfsuite, perfsuite_corpus, perfsuite_cache):
    """Length bucketing vs plain padded batches of the TF-native cache loader, interleaved: the padding
    each wastes (real / padded frames) and the same-run speed ratio."""
    from perfsuite.measure.speech import FrameCounter

    frames = sorted(MelConfig().num_frames(inspect_wav(wav_path(perfsuite_corpus, u.id)).num_frames)
                    for u in read_metadata(perfsuite_corpus))
    boundaries = tuple(sorted({frames[len(frames) * q // 8] for q in range(1, 8)}))  # octiles of the lengths
    shape = {"kind": "tf_native", "source": "cache", "batch_size": RATIO_BATCH, "workers": RATIO_WORKERS}
    counters = {"bucketed": FrameCounter(), "padded": FrameCounter()}
    datasets = {"bucketed": _loader_dataset(perfsuite_corpus, perfsuite_cache, bucket_boundaries=boundaries,
                                            **shape)[0].repeat(),
                "padded": _loader_dataset(perfsuite_corpus, perfsuite_cache, **shape)[0].repeat()}
    profile = perfsuite.profile

    def round_of(label):
        iterator = iterate(datasets[label])
        return lambda: measure_dataset(dataset=iterator, warmup_batches=1, measure_batches=profile.measure_batches,
                                       min_seconds=profile.min_round_s, samples_in=counters[label])

    perfsuite.compare("bucketed_over_padded_ratio", a=round_of("bucketed"), b=round_of("padded"))
    efficiency = {label: sum(c.real) / sum(c.padded) for label, c in counters.items()}
    perfsuite.record({f"{label}_padding_efficiency": value for label, value in efficiency.items()})
    assert efficiency["bucketed"] > efficiency["padded"], efficiency


def test_raw_read_ceiling(perfsuite, perfsuite_corpus, perfsuite_cache, tensorflow, batch_size, workers):
    dataset = _raw_read_dataset(tensorflow, perfsuite_corpus, perfsuite_cache, batch_size=batch_size, workers=workers)
    side = _ratio_side("raw_read", batch_size, workers)
    assert perfsuite.measure_dataset(dataset, name="raw_read", side=side).samples_per_s > 0


def test_compute_ceiling(perfsuite, perfsuite_corpus, tensorflow, batch_size, workers):
    dataset = _compute_ceiling_dataset(tensorflow, perfsuite_corpus, batch_size=batch_size, workers=workers)
    side = _ratio_side("compute_ceiling", batch_size, workers)
    assert perfsuite.measure_dataset(dataset, name="compute_ceiling", side=side).samples_per_s > 0


def _ratio_sides(tf, corpus, cache):
    """Each side of a loader ratio: a dataset at batch 16, 2 workers."""
    shape = {"batch_size": RATIO_BATCH, "workers": RATIO_WORKERS}
    return {
        "tf_native_wav": lambda: _loader_dataset(corpus, cache, kind="tf_native", source="wav", **shape)[0],
        "numpy_function_wav": lambda: _loader_dataset(corpus, cache, kind="numpy_function", source="wav", **shape)[0],
        "librosa_wav": lambda: _loader_dataset(corpus, cache, kind="librosa", source="wav", **shape)[0],
        "tf_native_cache": lambda: _loader_dataset(corpus, cache, kind="tf_native", source="cache", **shape)[0],
        "tf_native_wav_in_graph": lambda: _loader_dataset(corpus, cache, kind="tf_native", source="wav",
                                                          decode="in_graph", **shape)[0],
        "tf_native_cache_in_graph": lambda: _loader_dataset(corpus, cache, kind="tf_native", source="cache",
                                                            decode="in_graph", **shape)[0],
        "numpy_function_cache": lambda: _loader_dataset(corpus, cache, kind="numpy_function", source="cache",
                                                        **shape)[0],
        "compute_ceiling": lambda: _compute_ceiling_dataset(tf, corpus, **shape),
        "raw_read": lambda: _raw_read_dataset(tf, corpus, cache, **shape),
    }


RATIOS = {  # name: (A, B); the ratio is A's samples/s over B's, pair by pair
    "tf_native_over_numpy_function_wav_ratio": ("tf_native_wav", "numpy_function_wav"),
    "tf_native_over_librosa_wav_ratio": ("tf_native_wav", "librosa_wav"),
    "tf_native_over_numpy_function_cache_ratio": ("tf_native_cache", "numpy_function_cache"),
    "cache_over_wav_ratio": ("tf_native_cache", "tf_native_wav"),
    "tf_native_wav_over_compute_ceiling_ratio": ("tf_native_wav", "compute_ceiling"),
    "tf_native_cache_over_raw_read_ratio": ("tf_native_cache", "raw_read"),
    # Upper bounds of the TF-native WAV loader's ratios: its compute ceiling over the same peers. A ratio
    # target above its bound cannot be met without a cheaper mel (the definition fixes the math).
    "compute_ceiling_over_numpy_function_wav_ratio": ("compute_ceiling", "numpy_function_wav"),
    "compute_ceiling_over_librosa_wav_ratio": ("compute_ceiling", "librosa_wav"),
    # What reading headers once at preflight (and verifying them) gains over parsing them on every read.
    "preflight_over_in_graph_decode_wav_ratio": ("tf_native_wav", "tf_native_wav_in_graph"),
    "preflight_over_in_graph_decode_cache_ratio": ("tf_native_cache", "tf_native_cache_in_graph"),
}


@pytest.mark.parametrize("ratio", list(RATIOS), ids=[name.removesuffix("_ratio") for name in RATIOS])
def test_loader_ratio(perfsuite, perfsuite_corpus, perfsuite_cache, tensorflow, ratio):
    """Interleaved rounds of the two loaders' throughput (Recorder.compare_datasets)."""
    sides = _ratio_sides(tensorflow, perfsuite_corpus, perfsuite_cache)
    # Built at each side's first round: under perfsuite ab a side measured by an earlier ratio is not built.
    a, b = (lambda side=sides[name]: side().repeat() for name in RATIOS[ratio])
    result = perfsuite.compare_datasets(ratio, a=a, b=b, sides=RATIOS[ratio])
    # Rounds are the fixture's (or, under perfsuite ab, the controller's) to count; the figures must be speeds.
    assert result.ratios and all(math.isfinite(r) and r > 0 for r in result.ratios)
