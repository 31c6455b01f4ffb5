"""A pipeline of the kind TTS projects write: an index dataset mapped through tf.numpy_function that
makes a (fake) utterance's mel in numpy, padded into batches; and a small compiled training step.

It stands for *your* code: nothing here imports perfsuite.
"""

import numpy as np
import tensorflow as tf

N_MELS = 80
HOP_LENGTH, SAMPLE_RATE = 256, 22050


def _load(index):
    """What a loader does per utterance: some numpy work, returning a mel of data-dependent length."""
    rng = np.random.default_rng(int(index))
    frames = int(rng.integers(100, 400))
    audio = rng.standard_normal(frames * HOP_LENGTH).astype(np.float32)
    spectrum = np.abs(np.fft.rfft(audio.reshape(frames, HOP_LENGTH), axis=1))[:, :N_MELS]
    return np.log(spectrum + 1e-5).astype(np.float32), np.int32(frames)


def make_dataset(batch_size: int = 16, utterances: int = 256, prefetch: bool = True) -> tf.data.Dataset:
    def load(index):
        mel, frames = tf.numpy_function(_load, [index], (tf.float32, tf.int32))
        mel.set_shape([None, N_MELS])
        frames.set_shape([])
        return {"mel": mel, "mel_len": frames}

    dataset = tf.data.Dataset.range(utterances).map(load, num_parallel_calls=2)
    dataset = dataset.padded_batch(batch_size, padded_shapes={"mel": [400, N_MELS], "mel_len": []},
                                   drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE) if prefetch else dataset


def make_step():
    """A compiled step over the padded mel batch (a stand-in for a model's forward and backward pass)."""
    weights = tf.Variable(tf.random.normal([N_MELS, N_MELS], seed=0) * 0.01)
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function(jit_compile=True, input_signature=[{"mel": tf.TensorSpec([None, 400, N_MELS], tf.float32),
                                                     "mel_len": tf.TensorSpec([None], tf.int32)}])
    def step(batch):
        with tf.GradientTape() as tape:
            hidden = batch["mel"]
            for _ in range(8):
                hidden = tf.tanh(hidden @ weights)
            loss = tf.reduce_mean(tf.square(hidden))
        optimizer.apply_gradients([(tape.gradient(loss, weights), weights)])
        return loss

    return step
