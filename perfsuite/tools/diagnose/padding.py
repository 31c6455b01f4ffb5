"""The padding fix: length bucketing instead of padding to a fixed length, timed on the user's own step at the
real lengths (a step's cost that grows with frames is what padding wastes): the samples of PADDING_BATCHES
batches, each one's audio cut to its true length, batched again by bucket_by_sequence_length in BUCKETS
buckets at the quantiles of the true lengths, each padded to its own longest; the rest goes as sliced."""

from __future__ import annotations

import functools

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.batch_spec import leaves
from perfsuite.measure.speech import canonical_batch
from perfsuite.measure.step_model import StepModel
from perfsuite.measure.timing import leading_dim
from perfsuite.tools.diagnose.fixes import NotApplicable
from perfsuite.tools.diagnose.streams import Stream
from perfsuite.tools.diagnose.targets import one_line_error

PADDING_BATCHES = 16  # batches taken from the pipeline once: their samples fed to the step padded, bucketed
BUCKETS = 4  # length buckets, bounded at the quantiles of the true lengths


def true_lengths(batches: list, layout) -> list[np.ndarray]:
    """Per batch, its samples' true lengths (speech.canonical_batch's)."""
    return [np.asarray(canonical_batch(batch, layout)["mel_len"], np.int64) for batch in batches]


def boundaries(lengths: np.ndarray, buckets: int = BUCKETS) -> list[int]:
    """At most buckets - 1 bucket boundaries (bucket i holds lengths in [b[i-1], b[i])) at the quantiles of
    lengths, strictly increasing, none at or below the shortest (no bucket left empty at the bottom)."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return []
    edges = {int(np.ceil(q)) for q in np.quantile(lengths, [i / buckets for i in range(1, buckets)])}
    return sorted(edge for edge in edges if edge > lengths.min())


def bucketed(batches: list, layout, *, batch_size: int, buckets: int = BUCKETS) -> list:
    """Every sample of batches bucketed as the module says, batch_size a batch (TensorFlow's error if not)."""
    tf = tensorflow()
    lengths = true_lengths(batches, layout)
    edges = boundaries(np.concatenate(lengths), buckets)
    datasets = [tf.data.Dataset.from_tensor_slices((batch, count)) for batch, count in zip(batches, lengths)]

    def cut(sample, length):
        parts = dict(leaves(sample))  # tf.nest's order
        # one sample: its time axis is the batch's less one
        parts[layout.mel] = tf.gather(parts[layout.mel], tf.range(length), axis=layout.axis - 1)
        if layout.mel_len is not None:
            parts[layout.mel_len] = tf.cast(length, parts[layout.mel_len].dtype)
        return tf.nest.pack_sequence_as(sample, list(parts.values())), length

    grouped = functools.reduce(tf.data.Dataset.concatenate, datasets).map(cut).bucket_by_sequence_length(
        lambda sample, length: tf.cast(length, tf.int32),  # the op compares it with int32 boundaries
        edges, [batch_size] * (len(edges) + 1), pad_to_bucket_boundary=False, drop_remainder=False)
    return list(grouped.map(lambda sample, length: sample))


def _shapes(batch) -> tuple:
    return tuple(tuple(getattr(value, "shape", ())) for _, value in leaves(batch))


def _words(buckets: int) -> str:
    return (f"bucketing by length (tf.data bucket_by_sequence_length, {buckets} bucket"
            f"{'' if buckets == 1 else 's'}) instead of padding to a fixed length")


class PaddingComparison:
    """The step on PADDING_BATCHES batches as the pipeline pads them ('before') vs bucketed ('after'), after a
    warm-up round (a tf.function step traces each new shape once). Applicable with a step, non-ragged audio
    padded past each batch's longest, batches that split into samples, and a step that takes them bucketed."""

    name = "padding"
    warmup_rounds = 1

    def __init__(self, step: StepModel | None, dataset, spec: str, *, layout, padding):
        self.step, self.dataset, self.spec, self.layout, self.padding = step, dataset, spec, layout, padding
        self.words = _words(BUCKETS)
        self.unit = f"samples/s of the step on the samples of {PADDING_BATCHES} of the pipeline's batches"
        self.sides, self.samples = {}, 0  # samples: on each side (bucketing keeps every sample)

    def prepare(self) -> None:
        if self.step is None:
            raise NotApplicable("needs --step: the gain is the step's")
        if self.layout is None or self.layout.mel is None:
            raise NotApplicable("no audio component in the batches")
        if self.layout.ragged:
            raise NotApplicable("the audio is ragged: its batches hold no padding")
        if self.padding is None or self.padding.beyond_longest <= 0:
            raise NotApplicable("no padding past each batch's longest clip was measured")
        stream = Stream(self.dataset, self.spec)
        padded = [stream.next() for _ in range(PADDING_BATCHES)]
        stream.close()
        try:
            lengths = np.concatenate(true_lengths(padded, self.layout))
            after = bucketed(padded, self.layout, batch_size=leading_dim(padded[0]))
        except Exception as error:  # noqa: BLE001 -- a batch TensorFlow cannot split into samples: said
            why = one_line_error(error)
            raise NotApplicable(f"the batches could not be split into samples: {why}") from None
        for batch in {_shapes(batch): batch for batch in reversed(after)}.values():  # each shape traced now
            try:
                self.step.call_s(batch)
            except Exception as error:  # noqa: BLE001 -- the user's step may refuse another length: said
                why = one_line_error(error)
                raise NotApplicable(f"the step refused the bucketed batches: {why}") from None
        self.words = _words(len(boundaries(lengths)) + 1)
        self.unit = f"samples/s of the step on {lengths.size} of the pipeline's samples"
        self.sides, self.samples = {"before": padded, "after": after}, lengths.size

    def rate(self, side: str, read_s: float) -> float:
        """Samples per second of the step over whole passes of the side's batches, read_s at least."""
        batches, passes, seconds = self.sides[side], 0, 0.0
        while passes == 0 or seconds < read_s:
            seconds += self.step.calls(iter(batches), count=len(batches)).seconds
            passes += 1
        return passes * self.samples / seconds

    def close(self) -> None:
        self.sides = {}
