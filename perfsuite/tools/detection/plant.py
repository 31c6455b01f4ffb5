"""The plant: more of the same work in whole units, so that its size is exact on any machine.

The pipeline is the TF-native WAV loader (decode, STFT, log-mel) over a corpus whose utterances all
have the same length, so every utterance is the same work. A batch delivers ``BATCH`` samples; the
planted pipeline at share ``x`` decodes and computes ``BATCH * (1 + x)`` utterances for every batch
and delivers the first ``BATCH`` of them (``BATCH`` is chosen so that every share of LEVELS is a
whole number of extra utterances). Its time per delivered sample is then 1 + x times the genuine
one, whatever this machine's speed: the work that grows is the loader's own per-utterance work, in
whole utterances, and nothing else is added. Only what the loader does once per batch (handing the
batch over, reading it back) is not repeated. Its size is certified in work: the work fingerprint's
float ops per sample are exactly 1 + x times the genuine ones (perfsuite.tools.detection.curve
.certify_plant); its time cost is measured and printed beside it.

Why not extra work of another kind (a random signal's mel, a sleep): its cost relative to the
loader's is a property of the machine; a fixed seam makes a "10 %" plant cost whatever the seam costs.
TensorFlow is imported only when a pipeline is built.
"""

from __future__ import annotations

from pathlib import Path

from perfsuite.data.corpus import CorpusSpec

BATCH = 20  # samples a batch delivers: 5, 10, 20 and 40 % of it are whole utterances
WORKERS = 2  # parallel map calls, as the ratio gates' loaders use
CORPUS = CorpusSpec(num_utterances=40, min_seconds=2.0, max_seconds=2.0, seed=49)  # equal lengths: equal work


def extra_units(level: float, batch: int = BATCH) -> int:
    """Utterances computed and not delivered per batch at share ``level``: level x batch, which must be
    a whole number (ValueError otherwise: a fractional plant would not be exact)."""
    if not 0 <= level < 10:
        raise ValueError(f"level: expected a planted share in [0, 10), found {level!r}")
    extra = round(level * batch)
    if abs(extra - level * batch) > 1e-9:
        raise ValueError(f"level: expected a share that is a whole number of utterances of a batch of {batch}, "
                         f"found {level!r} ({level * batch:g} utterances)")
    return extra


def corpus(root: Path | None) -> Path:
    """The self-test's corpus of equal-length utterances, built once under ``root`` (the data dir)."""
    from perfsuite.data.corpus import build_corpus

    return build_corpus(CORPUS, root=root)


def planted_wav_dataset(dataset_dir: Path, level: float, *, batch: int = BATCH, workers: int = WORKERS):
    """The TF-native WAV loader's batches of ``batch`` samples, repeated, with ``level`` planted: each
    batch computed from batch + extra_units(level) utterances and cut to its first ``batch``. Level 0 is
    the genuine pipeline through the same stages."""
    from perfsuite._tensorflow import tensorflow
    from perfsuite.data.loaders import LoaderConfig, build_loader

    tf = tensorflow()
    extra = extra_units(level, batch)
    loader = build_loader(dataset_dir=dataset_dir, config=LoaderConfig(kind="tf_native", source="wav", batch_size=1,
                                                                       num_parallel_calls=workers))
    # Repeated before batching, so every batch is full: no epoch ends in a short batch.
    batches = loader.dataset.unbatch().repeat().padded_batch(batch + extra)
    keep = tf.autograph.experimental.do_not_convert(lambda b: tf.nest.map_structure(lambda t: t[:batch], b))
    return batches.map(keep).prefetch(tf.data.AUTOTUNE)


def compute_ceiling_dataset(dataset_dir: Path, *, batch: int = BATCH, workers: int = WORKERS):
    """The gate's other side: the same mel over audio decoded once and held in memory, batches of
    ``batch``, repeated (as benchmarks/test_loaders.py builds the compute ceiling)."""
    from perfsuite._tensorflow import tensorflow
    from perfsuite.data.audio import MelConfig, log_mel_tf
    from perfsuite.data.corpus import read_metadata, wav_path

    tf = tensorflow()
    config = MelConfig()
    paths = [str(wav_path(dataset_dir, utt.id)) for utt in read_metadata(dataset_dir)]
    plain = tf.autograph.experimental.do_not_convert
    audio = (tf.data.Dataset.from_tensor_slices(paths)
             .map(plain(lambda p: tf.audio.decode_wav(tf.io.read_file(p), desired_channels=1).audio[:, 0])).cache())
    audio.reduce(0, lambda count, _: count + 1)  # fill the in-memory cache before anything is timed
    return (audio.repeat().map(plain(lambda a: log_mel_tf(a, config)), num_parallel_calls=workers)
            .padded_batch(batch).prefetch(tf.data.AUTOTUNE))
