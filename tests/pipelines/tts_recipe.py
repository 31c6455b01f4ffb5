"""A TTS input pipeline and training step in the style of public TF TTS recipes, with each defect a switch
(the --arg values, strings): `perfsuite diagnose --pipeline tests/pipelines/tts_recipe.py:make_dataset
--step tests/pipelines/tts_recipe.py:make_step --arg fixed_pad=1 ...`.

Batches are a tuple (tokens, mel, text_len, mel_len), or with structure=dict {tokens, mel, text_len, mel_len},
or with structure=nested {text: {tokens, length}, audio: {features, frames}}. Defects: fixed_pad (every clip padded to FIXED_FRAMES
before the STFT, its length then says FIXED_FRAMES), prefetch (a buffer of that many batches, 0 none),
options (a trailing with_options), python (a numpy_function, stateful as by default, doing a table lookup,
a per-token Python loop and text_ms of other Python work per clip), sequential (maps left sequential), to_device (prefetch_to_device followed by a map and
the repeat), prints (banners and per-element prints, tf.print in the step);
make_step's first call sleeps TTS_FIRST_CALL_S seconds in the step's first call (a slow trace and compile).
make_step's cost per frame: TTS_STEP_FRAME_COST (environment, default 0: none) dense layers of width 256
applied to every frame (the mel reshaped to [frames, 32], then matmul and tanh, repeated) and trained with
the rest, so a step's time grows with the frames its batch holds, padding included: what length bucketing
saves on fixed-padded batches.
"""

import os
import time

import numpy as np
import tensorflow as tf

HOP = 64
FIXED_FRAMES = 96
PHONES = {chr(ord("a") + i): i + 1 for i in range(26)}  # the lookup table (a pandas frame in the recipes)


def _text_of(index):
    return "the quick brown fox jumps over the lazy dog"[: 8 + int(index) % 30]


def _tokens(index, prints, text_s):
    time.sleep(text_s)  # the recipes' text normalisation and phonemisation, in Python
    out = []
    for character in _text_of(index):  # a per-token Python loop, as the recipes' text cleaners do
        out.append(PHONES.get(character, 0))
    if prints:
        print(f"tokenised utterance {int(index)}: {len(out)} tokens")
    return np.asarray(out, np.int32)


def _flag(value) -> bool:
    return str(value) not in ("0", "", "false", "False")


def make_dataset(n="48", batch="4", fixed_pad="1", prefetch="50", options="1", python="1", sequential="1",
                 prints="0", work="1", to_device="0", text_ms="2", structure="tuple"):
    """The pipeline; each defect switched by its --arg (see the module docstring)."""
    n, batch, prefetch, work = int(n), int(batch), int(prefetch), int(work)
    fixed, show, text_s = _flag(fixed_pad), _flag(prints), float(text_ms) / 1000
    if show:
        print("=" * 20 + " TTS recipe: building the input pipeline " + "=" * 20)
    calls = None if _flag(sequential) else tf.data.AUTOTUNE

    def tokens(index):
        if _flag(python):
            out = tf.numpy_function(lambda i: _tokens(i, show, text_s), [index], tf.int32)  # stateful, the default
        else:
            out = tf.fill([8 + tf.cast(index % 30, tf.int32)], 1)
        return tf.ensure_shape(out, [None])

    def audio(index):
        frames = 24 + tf.cast(index % 5, tf.int32) * 12  # 24..72 frames of real audio
        t = tf.range(frames * HOP, dtype=tf.float32)
        wave = tf.sin(t * 0.05 * tf.cast(1 + index % 3, tf.float32))
        length = frames
        if fixed:  # padded to a fixed length before the STFT: the length tensor then says FIXED_FRAMES
            wave = tf.pad(wave, [[0, FIXED_FRAMES * HOP - frames * HOP]])
            length = tf.constant(FIXED_FRAMES)
        for _ in range(work):
            spectrum = tf.abs(tf.signal.stft(wave, frame_length=256, frame_step=HOP, pad_end=True))
        mel = tf.math.log(spectrum[:, :32] + 1e-3)
        return mel, length

    def utterance(index):
        text = tokens(index)
        mel, length = audio(index)
        return _structured((text, mel, tf.shape(text)[0], length), structure)

    dataset = tf.data.Dataset.range(n).map(utterance, num_parallel_calls=calls)
    dataset = dataset.padded_batch(batch, drop_remainder=True)
    if _flag(to_device):  # prefetch_to_device with stages after it (TensorFlow wants it last); on CPU it runs
        dataset = dataset.apply(tf.data.experimental.prefetch_to_device("/cpu:0"))
        dataset = dataset.map(lambda *parts: parts if len(parts) > 1 else parts[0])
    dataset = dataset.repeat()
    if prefetch:
        dataset = dataset.prefetch(prefetch)
    if _flag(options):
        opts = tf.data.Options()
        opts.deterministic = True
        dataset = dataset.with_options(opts)
    return dataset


def make_step():
    """A factory for the step: a small model's gradient step, whose first call sleeps TTS_FIRST_CALL_S
    seconds (environment, default 1); TTS_STEP_PRINTS=1 makes it print; TTS_STEP_COST its work;
    TTS_STEP_FRAME_COST dense layers of width 256 per frame (default 0)."""
    weights = tf.Variable(tf.zeros([32, 1]))
    delay = float(os.environ.get("TTS_FIRST_CALL_S", "1"))
    show, cost = _flag(os.environ.get("TTS_STEP_PRINTS", "0")), int(os.environ.get("TTS_STEP_COST", "1"))
    layers = _frame_layers(int(os.environ.get("TTS_STEP_FRAME_COST", "0")))

    @tf.function
    def train(tokens, mel, text_len, mel_len):
        with tf.GradientTape() as tape:
            x = mel
            for _ in range(cost):
                x = tf.tanh(x)
            loss = tf.reduce_mean(tf.square(tf.matmul(tf.reshape(x, [-1, 32]), weights) - 1.0))
            if layers:
                loss += tf.reduce_mean(tf.square(_per_frame(mel, layers)))
        variables = [weights, *layers]
        for variable, gradient in zip(variables, tape.gradient(loss, variables)):
            variable.assign_sub(0.01 * gradient)
        if show:
            tf.print("step loss", loss)
        return loss

    calls = [0]

    def step(batch):
        if calls[0] == 0:
            time.sleep(delay)
            if show:
                print("WARNING: first step compiles the model (this takes a while)")
        calls[0] += 1
        return train(*_as_tuple(batch))

    return step


def _frame_layers(count):
    """count dense layers of width 256 over frames of 32 mel bins (the first 32 -> 256, the rest 256 -> 256)."""
    return [tf.Variable(tf.random.stateless_normal([32 if i == 0 else 256, 256], seed=[i, 0], stddev=0.05))
            for i in range(count)]


def _per_frame(mel, layers):
    """The layers applied to every frame of mel [batch, frames, 32]: [batch * frames, 256]."""
    x = tf.reshape(mel, [-1, 32])
    for layer in layers:
        x = tf.tanh(tf.matmul(x, layer))
    return x


def _structured(parts, structure: str):
    """(tokens, mel, text_len, mel_len) in the batch structure asked for."""
    tokens, mel, text_len, mel_len = parts
    if structure == "tuple":
        return parts
    if structure == "dict":
        return {"tokens": tokens, "mel": mel, "text_len": text_len, "mel_len": mel_len}
    if structure == "nested":
        return {"text": {"tokens": tokens, "length": text_len}, "audio": {"features": mel, "frames": mel_len}}
    raise ValueError(f"structure: expected tuple, dict or nested, found {structure!r}")


def _as_tuple(batch):
    """A batch of any structure _structured() makes, as (tokens, mel, text_len, mel_len)."""
    if isinstance(batch, dict) and "audio" in batch:
        return batch["text"]["tokens"], batch["audio"]["features"], batch["text"]["length"], batch["audio"]["frames"]
    if isinstance(batch, dict):
        return batch["tokens"], batch["mel"], batch["text_len"], batch["mel_len"]
    return tuple(batch)
