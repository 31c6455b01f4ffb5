"""Input pipelines in the shapes other public TF TTS recipes take (not perfsuite's own recipe), for
`perfsuite diagnose --pipeline tests/pipelines/recipes.py:<factory> --step tests/pipelines/recipes.py:make_step
--frame-hop-s 0.01`:

- per_bin_norm: every clip padded to FIXED frames, then its mel normalised per bin (pad frames constant in
  time, not across bins), the length tensor saying FIXED for every clip.
- bins_first: mels [bins, time], batched [batch, bins, time], padded to each batch's longest.
- bucketed: already batched by length (bucket_by_sequence_length, one length per bucket).
- cache_after_repeat: a cache after an endless repeat.
- zipped: text and audio in two branches, zipped; the mel computed in nested tf.functions.
- tfrecord: mels read from TFRecord shards through a sequential interleave.

Every batch holds one clip of each length in LENGTHS (frames), so every batch's padding, and the audio per
sample, are known exactly: TRUTH gives them per factory.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

LENGTHS = (30, 45, 60, 80)  # frames of the clips, one of each per batch
BATCH = len(LENGTHS)
BINS = 20
FIXED = 128
HOP = 64
FRAME_S = 0.01  # what the tests give as --frame-hop-s


def truth(factory: str, n: int = 64, shards: int = 4) -> dict:
    """The padding efficiency over one pass of that factory's batches (real frames / padded frames) and the
    audio seconds per sample they hold, from the clips' true lengths in the order the pipeline batches them."""
    lengths = [LENGTHS[i % BATCH] for i in range(n)]
    if factory == "tfrecord":  # an interleave of cycle 2, block 1: two shards at a time, one element each in turn
        per = n // shards
        pairs = [(lengths[a * per:(a + 1) * per], lengths[(a + 1) * per:(a + 2) * per]) for a in range(0, shards, 2)]
        lengths = [x for first, second in pairs for both in zip(first, second) for x in both]
    batches = [lengths[i:i + BATCH] for i in range(0, n - n % BATCH, BATCH)]
    if factory == "bucketed":
        batches = [[length] * BATCH for length in LENGTHS]  # one length per bucket
    padded = sum(BATCH * (FIXED if factory == "per_bin_norm" else max(batch)) for batch in batches)
    return {"efficiency": sum(map(sum, batches)) / padded, "audio_s_per_sample": float(np.mean(lengths)) * FRAME_S}


def _frames(index):
    return tf.gather(tf.constant(LENGTHS), tf.cast(index % BATCH, tf.int32))


def _mel(index, frames):
    """[frames, BINS] of a deterministic, never-repeating spectrum-like signal."""
    t = tf.cast(tf.range(frames), tf.float32)[:, None]
    bins = tf.cast(tf.range(BINS), tf.float32)[None, :]
    return tf.sin(0.37 * t * (1.0 + bins) + tf.cast(index, tf.float32)) + 0.01 * t


@tf.function
def _spectrum(wave):
    return tf.abs(tf.signal.stft(wave, frame_length=128, frame_step=HOP, pad_end=True))


@tf.function
def _nested_mel(wave, frames):
    bank = tf.ones([65, BINS]) / 65.0
    return tf.math.log(tf.matmul(_spectrum(wave), bank) + 1e-3)[:frames]


def _tokens(index):
    return tf.fill([5 + tf.cast(index % 7, tf.int32)], tf.cast(index, tf.int32))


def per_bin_norm(n="64"):
    def clip(index):
        frames = _frames(index)
        mel = tf.pad(_mel(index, frames), [[0, FIXED - frames], [0, 0]])
        mean, std = tf.reduce_mean(mel, 0, keepdims=True), tf.math.reduce_std(mel, 0, keepdims=True) + 1e-3
        return _tokens(index), (mel - mean) / std, tf.constant(FIXED)  # the length tensor says FIXED

    dataset = tf.data.Dataset.range(int(n)).map(clip, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.padded_batch(BATCH, padded_shapes=([None], [FIXED, BINS], []), drop_remainder=True).repeat() \
        .prefetch(tf.data.AUTOTUNE)


def bins_first(n="64"):
    def clip(index):
        frames = _frames(index)
        return {"mel": tf.transpose(_mel(index, frames)), "mel_len": frames, "text": _tokens(index)}

    dataset = tf.data.Dataset.range(int(n)).map(clip, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.padded_batch(BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def bucketed(n="64"):
    def clip(index):
        frames = _frames(index)
        return _mel(index, frames), frames

    dataset = tf.data.Dataset.range(int(n)).map(clip, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.bucket_by_sequence_length(lambda mel, frames: frames, [40, 50, 70], [BATCH] * 4,
                                                drop_remainder=True)
    return dataset.repeat().prefetch(tf.data.AUTOTUNE)


def cache_after_repeat(n="64"):
    def clip(index):
        frames = _frames(index)
        return _mel(index, frames), frames

    dataset = tf.data.Dataset.range(int(n)).map(clip, num_parallel_calls=tf.data.AUTOTUNE).repeat().cache()
    return dataset.padded_batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def zipped(n="64"):
    text = tf.data.Dataset.range(int(n)).map(_tokens)

    def audio(index):
        frames = _frames(index)
        wave = tf.sin(tf.cast(tf.range(frames * HOP), tf.float32) * 0.01 * tf.cast(1 + index % 3, tf.float32))
        return _nested_mel(wave, frames), frames

    sound = tf.data.Dataset.range(int(n)).map(audio, num_parallel_calls=tf.data.AUTOTUNE)
    return tf.data.Dataset.zip((text, sound)).padded_batch(BATCH, drop_remainder=True).repeat() \
        .prefetch(tf.data.AUTOTUNE)


def tfrecord(n="64", shards="4"):
    directory = os.path.join(tempfile.gettempdir(), f"perfsuite-recipes-{os.getpid()}-{n}-{shards}")
    files = _write_shards(directory, int(n), int(shards))

    def parse(record):
        parsed = tf.io.parse_single_example(record, {"mel": tf.io.FixedLenFeature([], tf.string),
                                                     "frames": tf.io.FixedLenFeature([], tf.int64)})
        mel = tf.ensure_shape(tf.io.parse_tensor(parsed["mel"], tf.float32), [None, BINS])
        return mel, tf.cast(parsed["frames"], tf.int32)

    dataset = tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset, cycle_length=2)
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.padded_batch(BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def _write_shards(directory: str, n: int, shards: int) -> list:
    """n clips over shards TFRecord files (each shard a whole number of batches, LENGTHS in order)."""
    os.makedirs(directory, exist_ok=True)
    per_shard, files = n // shards, []
    for shard in range(shards):
        path = os.path.join(directory, f"mels-{shard:03d}.tfrecord")
        if not os.path.exists(path):
            with tf.io.TFRecordWriter(path + ".tmp") as writer:
                for index in range(shard * per_shard, (shard + 1) * per_shard):
                    frames = LENGTHS[index % BATCH]
                    mel = tf.io.serialize_tensor(_mel(index, frames)).numpy()
                    writer.write(tf.train.Example(features=tf.train.Features(feature={
                        "mel": tf.train.Feature(bytes_list=tf.train.BytesList(value=[mel])),
                        "frames": tf.train.Feature(int64_list=tf.train.Int64List(value=[frames]))}))
                        .SerializeToString())
            os.replace(path + ".tmp", path)
        files.append(path)
    return files


def make_step():
    """A step over any of the batches above: a per-frame dense layer over the mel (so padding costs time),
    its gradient applied."""
    weights = tf.Variable(tf.random.stateless_normal([BINS, 64], seed=[1, 0], stddev=0.1))

    @tf.function(reduce_retracing=True)
    def step(batch):
        mels = [x for x in tf.nest.flatten(batch) if x.dtype.is_floating]
        with tf.GradientTape() as tape:
            loss = 0.0
            for mel in mels:
                frames = tf.reshape(mel, [-1, BINS])
                loss += tf.reduce_mean(tf.tanh(tf.matmul(frames, weights)))
        weights.assign_sub(0.01 * tape.gradient(loss, weights))
        return loss

    return step
