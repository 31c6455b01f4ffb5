"""The small TTS model and its training step in eager / graph / XLA modes, fp32 or mixed_float16.

The model is a compact Transformer-TTS: character embedding, a text encoder of conv and transformer
blocks, a mel decoder with causal self-attention and cross-attention over the text (teacher forcing
through a small prenet), mel and stop-token heads and a conv postnet. It is written with plain
``tf.Module`` and ``tf.Variable`` so that tracing is quick and every op in the step is visible.

The step has no Python side effects and no ``tf.print``, so ``tf.function(jit_compile=True)`` compiles
it whole. Loss masks come from ``text_len`` and ``mel_len``, so padding never counts.
"""

import math
from dataclasses import dataclass

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.data.text import PAD_ID, VOCAB_SIZE

tf = tensorflow()

MODES = ("eager", "graph", "xla")
PRECISIONS = ("fp32", "mixed_float16")
BATCH_KEYS = ("tokens", "mel", "text_len", "mel_len")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the TTS model. ``vocab_size`` covers every token id of ``perfsuite.data.text``."""

    vocab_size: int = VOCAB_SIZE
    n_mels: int = 80
    d_model: int = 128
    num_heads: int = 4
    ffn_dim: int = 512
    encoder_conv_layers: int = 2
    encoder_layers: int = 2
    decoder_layers: int = 3
    prenet_dim: int = 128
    postnet_layers: int = 2
    conv_kernel: int = 5

    def __post_init__(self):
        if self.d_model % self.num_heads:
            raise ValueError(
                f"ModelConfig: d_model must be divisible by num_heads, found d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )


MODEL_PRESETS = {
    # Runs in milliseconds: for unit tests.
    "tiny": ModelConfig(
        d_model=32,
        num_heads=2,
        ffn_dim=64,
        encoder_conv_layers=1,
        encoder_layers=1,
        decoder_layers=1,
        prenet_dim=32,
        postnet_layers=1,
        conv_kernel=3,
    ),
    # One graph-mode step takes a few hundred ms on 2 CPU cores at batch 16, ~80 tokens, 400 frames.
    "default": ModelConfig(),
}


@dataclass(frozen=True)
class StepConfig:
    """How the training step runs.

    ``input_shapes`` is ``(batch_size, max_text_len, max_mel_frames)`` for a static input signature:
    one trace for every batch of that padded shape. ``batch_size`` None accepts a partial last batch
    without a retrace (under XLA it still costs one more compilation for the new batch size; a loader
    with ``drop_remainder`` avoids both). ``input_shapes`` None means dynamic shapes: a new trace for
    every new padded shape.
    """

    mode: str = "graph"
    precision: str = "fp32"
    input_shapes: tuple | None = None
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"StepConfig.mode: expected one of {MODES}, found {self.mode!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"StepConfig.precision: expected one of {PRECISIONS}, found {self.precision!r}")
        if self.input_shapes is not None:
            shapes = tuple(self.input_shapes)
            valid = (
                len(shapes) == 3
                and (shapes[0] is None or (isinstance(shapes[0], int) and shapes[0] > 0))
                and all(isinstance(n, int) and n > 0 for n in shapes[1:])
            )
            if not valid:
                raise ValueError(
                    "StepConfig.input_shapes: expected (batch_size or None, max_text_len, max_mel_frames) "
                    f"with positive ints, found {self.input_shapes!r}"
                )
            object.__setattr__(self, "input_shapes", shapes)

    @property
    def compute_dtype(self) -> tf.DType:
        return tf.float16 if self.precision == "mixed_float16" else tf.float32


# ---------------------------------------------------------------------------------------------------
# Layers. Variables are float32; every layer casts them to the compute dtype of its input, so the same
# model runs in fp32 or float16 compute.


def _glorot(rng: np.random.Generator, shape, fan_in: int, fan_out: int) -> tf.Variable:
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return tf.Variable(rng.uniform(-limit, limit, size=shape).astype(np.float32), name="kernel")


class Dense(tf.Module):
    def __init__(self, rng, d_in: int, d_out: int, name=None):
        super().__init__(name=name)
        self.kernel = _glorot(rng, (d_in, d_out), d_in, d_out)
        self.bias = tf.Variable(tf.zeros([d_out]), name="bias")

    def __call__(self, x):
        # Flatten to 2-D so the product is a plain MatMul, as Keras' Dense does.
        d_in, d_out = self.kernel.shape
        flat = tf.reshape(x, [-1, d_in])
        y = tf.matmul(flat, tf.cast(self.kernel, x.dtype)) + tf.cast(self.bias, x.dtype)
        return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [d_out]], axis=0))


class Conv1D(tf.Module):
    def __init__(self, rng, d_in: int, d_out: int, kernel_size: int, name=None):
        super().__init__(name=name)
        fan_in, fan_out = d_in * kernel_size, d_out * kernel_size
        self.kernel = _glorot(rng, (kernel_size, d_in, d_out), fan_in, fan_out)
        self.bias = tf.Variable(tf.zeros([d_out]), name="bias")

    def __call__(self, x):
        y = tf.nn.conv1d(x, tf.cast(self.kernel, x.dtype), stride=1, padding="SAME")
        return y + tf.cast(self.bias, x.dtype)


class LayerNorm(tf.Module):
    def __init__(self, dim: int, epsilon: float = 1e-5, name=None):
        super().__init__(name=name)
        self.gamma = tf.Variable(tf.ones([dim]), name="gamma")
        self.beta = tf.Variable(tf.zeros([dim]), name="beta")
        self.epsilon = epsilon

    def __call__(self, x):
        # Statistics in float32 even under float16 compute, as Keras' LayerNormalization does.
        x32 = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x32, axes=[-1], keepdims=True)
        y = (x32 - mean) * tf.math.rsqrt(variance + self.epsilon) * self.gamma + self.beta
        return tf.cast(y, x.dtype)


class MultiHeadAttention(tf.Module):
    def __init__(self, rng, d_model: int, num_heads: int, name=None):
        super().__init__(name=name)
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.query = Dense(rng, d_model, d_model, name="query")
        self.key = Dense(rng, d_model, d_model, name="key")
        self.value = Dense(rng, d_model, d_model, name="value")
        self.output = Dense(rng, d_model, d_model, name="output")

    def _split_heads(self, x):
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, length, self.num_heads, self.head_dim])
        return tf.transpose(x, [0, 2, 1, 3])  # [B, H, T, Dh]

    def __call__(self, x, context, mask):
        """``mask``: bool, broadcastable to [B, H, Tq, Tk]; True where a query may attend a key."""
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(context))
        v = self._split_heads(self.value(context))
        scores = tf.matmul(q, k, transpose_b=True) * tf.cast(1.0 / math.sqrt(self.head_dim), x.dtype)
        # The dtype's lowest finite value, not -inf: a fully masked row becomes uniform, never NaN.
        scores = tf.where(mask, scores, tf.cast(x.dtype.min, x.dtype))
        weights = tf.nn.softmax(scores, axis=-1)
        out = tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3])
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        return self.output(tf.reshape(out, [batch, length, self.num_heads * self.head_dim]))


class FeedForward(tf.Module):
    def __init__(self, rng, d_model: int, ffn_dim: int, name=None):
        super().__init__(name=name)
        self.inner = Dense(rng, d_model, ffn_dim, name="inner")
        self.outer = Dense(rng, ffn_dim, d_model, name="outer")

    def __call__(self, x):
        return self.outer(tf.nn.gelu(self.inner(x), approximate=True))


class ConvBlock(tf.Module):
    """Residual conv block of the text encoder: conv -> layer norm -> ReLU."""

    def __init__(self, rng, config: ModelConfig, name=None):
        super().__init__(name=name)
        self.conv = Conv1D(rng, config.d_model, config.d_model, config.conv_kernel, name="conv")
        self.norm = LayerNorm(config.d_model, name="norm")

    def __call__(self, x, frame_mask):
        # Zero the padding first so that the kernel cannot carry it into real positions.
        x = x * frame_mask
        return x + tf.nn.relu(self.norm(self.conv(x)))


class EncoderBlock(tf.Module):
    """Pre-norm transformer block: self-attention over the text, then a feed-forward layer."""

    def __init__(self, rng, config: ModelConfig, name=None):
        super().__init__(name=name)
        self.attention_norm = LayerNorm(config.d_model, name="attention_norm")
        self.attention = MultiHeadAttention(rng, config.d_model, config.num_heads, name="attention")
        self.ffn_norm = LayerNorm(config.d_model, name="ffn_norm")
        self.ffn = FeedForward(rng, config.d_model, config.ffn_dim, name="ffn")

    def __call__(self, x, attention_mask):
        h = self.attention_norm(x)
        x = x + self.attention(h, h, attention_mask)
        return x + self.ffn(self.ffn_norm(x))


class DecoderBlock(tf.Module):
    """Pre-norm block: causal self-attention, cross-attention over the text, feed-forward."""

    def __init__(self, rng, config: ModelConfig, name=None):
        super().__init__(name=name)
        self.self_norm = LayerNorm(config.d_model, name="self_norm")
        self.self_attention = MultiHeadAttention(rng, config.d_model, config.num_heads, name="self_attention")
        self.cross_norm = LayerNorm(config.d_model, name="cross_norm")
        self.cross_attention = MultiHeadAttention(
            rng, config.d_model, config.num_heads, name="cross_attention"
        )
        self.ffn_norm = LayerNorm(config.d_model, name="ffn_norm")
        self.ffn = FeedForward(rng, config.d_model, config.ffn_dim, name="ffn")

    def __call__(self, x, memory, self_mask, cross_mask):
        h = self.self_norm(x)
        x = x + self.self_attention(h, h, self_mask)
        x = x + self.cross_attention(self.cross_norm(x), memory, cross_mask)
        return x + self.ffn(self.ffn_norm(x))


def _positions(length, dim: int, dtype):
    """Sinusoidal position encoding [length, dim], built in the graph so any length works."""
    position = tf.cast(tf.range(length), tf.float32)[:, None]
    frequency = tf.exp(tf.range(0, dim, 2, dtype=tf.float32) * (-math.log(10000.0) / dim))
    angles = position * frequency[None, :]
    return tf.cast(tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1), dtype)


class TTSModel(tf.Module):
    """Transformer-TTS-like model; ``loss(batch, compute_dtype)`` is the masked training loss."""

    def __init__(self, config: ModelConfig, *, seed: int, name="tts"):
        super().__init__(name=name)
        self.config = config
        rng = np.random.default_rng(seed)
        d = config.d_model
        self.embedding = tf.Variable(
            rng.normal(0.0, d**-0.5, size=(config.vocab_size, d)).astype(np.float32), name="embedding"
        )
        self.encoder_convs = [
            ConvBlock(rng, config, name=f"encoder_conv_{i}") for i in range(config.encoder_conv_layers)
        ]
        self.encoder_blocks = [
            EncoderBlock(rng, config, name=f"encoder_{i}") for i in range(config.encoder_layers)
        ]
        self.encoder_norm = LayerNorm(d, name="encoder_norm")
        self.prenet_1 = Dense(rng, config.n_mels, config.prenet_dim, name="prenet_1")
        self.prenet_2 = Dense(rng, config.prenet_dim, d, name="prenet_2")
        self.decoder_blocks = [
            DecoderBlock(rng, config, name=f"decoder_{i}") for i in range(config.decoder_layers)
        ]
        self.decoder_norm = LayerNorm(d, name="decoder_norm")
        self.mel_head = Dense(rng, d, config.n_mels, name="mel_head")
        self.stop_head = Dense(rng, d, 1, name="stop_head")
        self.postnet = []
        if config.postnet_layers:
            widths = [config.n_mels] + [d] * (config.postnet_layers - 1) + [config.n_mels]
            self.postnet = [
                Conv1D(rng, widths[i], widths[i + 1], config.conv_kernel, name=f"postnet_{i}")
                for i in range(config.postnet_layers)
            ]

    def encode(self, tokens, text_mask, dtype):
        d = self.config.d_model
        x = tf.gather(tf.cast(self.embedding, dtype), tokens) * tf.cast(math.sqrt(d), dtype)
        x = x + _positions(tf.shape(tokens)[1], d, dtype)[None]
        frame_mask = tf.cast(text_mask, dtype)[:, :, None]
        for block in self.encoder_convs:
            x = block(x, frame_mask)
        attention_mask = text_mask[:, None, None, :]  # [B, 1, 1, T]: padded keys masked
        for block in self.encoder_blocks:
            x = block(x, attention_mask)
        return self.encoder_norm(x)

    def decode(self, mel, memory, text_mask, mel_mask, dtype):
        """Teacher forcing: frame t is predicted from frames < t (mel shifted right by one)."""
        mel = tf.cast(mel, dtype)
        previous = tf.pad(mel[:, :-1], [[0, 0], [1, 0], [0, 0]])
        x = tf.nn.relu(self.prenet_2(tf.nn.relu(self.prenet_1(previous))))
        frames = tf.shape(mel)[1]
        x = x + _positions(frames, self.config.d_model, dtype)[None]
        causal = tf.linalg.band_part(tf.ones([frames, frames], tf.bool), -1, 0)
        self_mask = tf.logical_and(causal[None, None], mel_mask[:, None, None, :])
        cross_mask = text_mask[:, None, None, :]
        for block in self.decoder_blocks:
            x = block(x, memory, self_mask, cross_mask)
        x = self.decoder_norm(x)
        mel_before = self.mel_head(x)
        stop_logits = self.stop_head(x)[..., 0]
        mel_after = mel_before
        if self.postnet:
            # Padded frames are zeroed so the postnet kernels cannot carry them into real frames.
            h = mel_before * tf.cast(mel_mask, dtype)[:, :, None]
            for i, conv in enumerate(self.postnet):
                h = conv(h)
                if i < len(self.postnet) - 1:
                    h = tf.tanh(h)
            mel_after = mel_before + h
        return mel_before, mel_after, stop_logits

    def loss(self, batch, dtype):
        """Masked loss in float32: L1 on mel (before and after the postnet) + BCE on the stop token."""
        tokens, mel, text_len, mel_len = (batch[k] for k in BATCH_KEYS)
        text_mask = tf.sequence_mask(text_len, tf.shape(tokens)[1])
        frames = tf.shape(mel)[1]
        mel_mask = tf.sequence_mask(mel_len, frames)
        memory = self.encode(tokens, text_mask, dtype)
        mel_before, mel_after, stop_logits = self.decode(mel, memory, text_mask, mel_mask, dtype)

        weights = tf.cast(mel_mask, tf.float32)
        num_frames = tf.maximum(tf.reduce_sum(weights), 1.0)
        bin_weights = weights[:, :, None] / (num_frames * self.config.n_mels)
        mel_loss = tf.reduce_sum(tf.abs(tf.cast(mel_before, tf.float32) - mel) * bin_weights)
        mel_loss += tf.reduce_sum(tf.abs(tf.cast(mel_after, tf.float32) - mel) * bin_weights)
        stop_target = tf.one_hot(mel_len - 1, frames, dtype=tf.float32)
        stop_bce = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=stop_target, logits=tf.cast(stop_logits, tf.float32)
        )
        stop_loss = tf.reduce_sum(stop_bce * weights) / num_frames
        return mel_loss + stop_loss


# ---------------------------------------------------------------------------------------------------
# Optimizer and loss scaling.


class AdamW(tf.Module):
    """Adam with decoupled weight decay (applied to matrices, not to biases or norms)."""

    def __init__(self, variables, *, learning_rate, weight_decay, beta_1=0.9, beta_2=0.98, epsilon=1e-8):
        super().__init__(name="adamw")
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m = [tf.Variable(tf.zeros_like(v), trainable=False, name="m") for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v), trainable=False, name="v") for v in variables]

    def apply(self, grads, variables):
        self.iterations.assign_add(1)
        t = tf.cast(self.iterations, tf.float32)
        step_size = self.learning_rate * tf.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t)
        for grad, var, m, v in zip(grads, variables, self.m, self.v):
            m.assign(self.beta_1 * m + (1.0 - self.beta_1) * grad)
            v.assign(self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad))
            update = step_size * m / (tf.sqrt(v) + self.epsilon)
            if len(var.shape) >= 2:
                update += self.learning_rate * self.weight_decay * var
            var.assign_sub(update)


class DynamicLossScale(tf.Module):
    """Loss scale for float16 compute: halve on non-finite gradients, double after a run of good steps."""

    def __init__(self, *, initial_scale=2.0**15, growth_interval=2000):
        super().__init__(name="loss_scale")
        self.scale = tf.Variable(initial_scale, dtype=tf.float32, trainable=False, name="scale")
        self.good_steps = tf.Variable(0, dtype=tf.int32, trainable=False, name="good_steps")
        self.growth_interval = growth_interval

    def update(self, finite):
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.growth_interval)
        kept = tf.where(grow, self.scale * 2.0, self.scale)
        new_scale = tf.where(finite, kept, tf.maximum(self.scale / 2.0, 1.0))
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1, 0))
        self.scale.assign(new_scale)


# ---------------------------------------------------------------------------------------------------
# The training step.


class TrainStep:
    """One optimisation step on a batch; ``step(batch)`` returns the (unscaled) loss, float32 scalar."""

    def __init__(self, *, model_config: ModelConfig, config: StepConfig):
        self.config = config
        self.model = TTSModel(model_config, seed=config.seed)
        self.variables = self.model.trainable_variables
        self.optimizer = AdamW(
            self.variables, learning_rate=config.learning_rate, weight_decay=config.weight_decay
        )
        self.loss_scale = DynamicLossScale() if config.precision == "mixed_float16" else None
        self._signature = self._input_signature()
        if config.mode == "eager":
            self._fn = None
        else:
            self._fn = tf.function(
                self._train_step,
                input_signature=self._signature,
                jit_compile=config.mode == "xla",
                autograph=False,  # no data-dependent Python control flow; tf.cond is explicit
            )

    def _input_signature(self):
        if self.config.input_shapes is None:
            return None
        batch, text, frames = self.config.input_shapes
        n_mels = self.model.config.n_mels
        return [
            {
                "tokens": tf.TensorSpec([batch, text], tf.int32, name="tokens"),
                "mel": tf.TensorSpec([batch, frames, n_mels], tf.float32, name="mel"),
                "text_len": tf.TensorSpec([batch], tf.int32, name="text_len"),
                "mel_len": tf.TensorSpec([batch], tf.int32, name="mel_len"),
            }
        ]

    def _train_step(self, batch):
        dtype = self.config.compute_dtype
        with tf.GradientTape() as tape:
            loss = self.model.loss(batch, dtype)
            scaled_loss = loss * self.loss_scale.scale if self.loss_scale is not None else loss
        # The embedding's gradient arrives as IndexedSlices; the optimizer wants dense tensors.
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(scaled_loss, self.variables)]
        if self.loss_scale is None:
            grads, _ = tf.clip_by_global_norm(grads, self.config.clip_norm)
            self.optimizer.apply(grads, self.variables)
            return loss
        grads = [g / self.loss_scale.scale for g in grads]
        norm = tf.linalg.global_norm(grads)
        finite = tf.math.is_finite(norm)
        grads, _ = tf.clip_by_global_norm(grads, self.config.clip_norm, use_norm=norm)

        def apply():
            self.optimizer.apply(grads, self.variables)
            return tf.constant(True)

        # A non-finite step leaves weights and optimizer state untouched; only the scale changes.
        tf.cond(finite, apply, lambda: tf.constant(False))
        self.loss_scale.update(finite)
        return loss

    def _prepare(self, batch):
        missing = [k for k in BATCH_KEYS if k not in batch]
        if missing:
            raise KeyError(f"training batch: expected keys {BATCH_KEYS}, missing {missing}")
        # "id" (strings) and any other extra keys stay out: strings cannot enter an XLA cluster.
        tensors = {
            "tokens": tf.convert_to_tensor(batch["tokens"], tf.int32),
            "mel": tf.convert_to_tensor(batch["mel"], tf.float32),
            "text_len": tf.convert_to_tensor(batch["text_len"], tf.int32),
            "mel_len": tf.convert_to_tensor(batch["mel_len"], tf.int32),
        }
        if self.config.input_shapes is not None:
            for key, spec in self._signature[0].items():
                if not spec.shape.is_compatible_with(tensors[key].shape):
                    raise ValueError(
                        f"training batch[{key!r}]: expected shape {spec.shape} (static input signature "
                        f"{self.config.input_shapes}), found {tensors[key].shape}"
                    )
        return tensors

    def step(self, batch):
        tensors = self._prepare(batch)
        if self._fn is None:
            return self._train_step(tensors)
        return self._fn(tensors)

    @property
    def function(self):
        """The step's tf.function (its input signature, its XLA setting); None in eager mode."""
        return self._fn

    def tracing_count(self):
        """How many times the step function has been traced; None in eager mode."""
        return None if self._fn is None else self._fn.experimental_get_tracing_count()

    def __call__(self, batch):
        """The step as a plain callable, for the timing functions (which read ``tracing_count``)."""
        return self.step(batch)


def make_train_step(
    *,
    model_config: ModelConfig,
    mode: str = "graph",
    precision: str = "fp32",
    input_shapes: tuple | None = None,
    seed: int = 0,
) -> TrainStep:
    """Build the model, optimizer and step function for ``mode`` ('eager', 'graph', 'xla')."""
    config = StepConfig(mode=mode, precision=precision, input_shapes=input_shapes, seed=seed)
    return TrainStep(model_config=model_config, config=config)


def make_synthetic_batch(
    *,
    batch_size: int,
    text_len: int,
    mel_frames: int,
    seed: int,
    vocab_size: int = VOCAB_SIZE,
    n_mels: int = 80,
) -> dict:
    """A seeded batch in the loader format, padded to (text_len, mel_frames); item 0 is full length.

    The mels are smooth in time and in frequency (like log-mels), so teacher forcing has something to
    learn; padding is zeros, as the loaders pad.
    """
    rng = np.random.default_rng(seed)
    text_lens = rng.integers(max(1, text_len // 2), text_len + 1, size=batch_size).astype(np.int32)
    mel_lens = rng.integers(max(2, mel_frames // 2), mel_frames + 1, size=batch_size).astype(np.int32)
    text_lens[0], mel_lens[0] = text_len, mel_frames
    tokens = np.full((batch_size, text_len), PAD_ID, np.int32)
    mel = np.zeros((batch_size, mel_frames, n_mels), np.float32)
    t = np.arange(mel_frames)[:, None]
    bins = np.arange(n_mels)[None, :]
    for i in range(batch_size):
        tokens[i, : text_lens[i]] = rng.integers(PAD_ID + 1, vocab_size, size=text_lens[i])
        phase, rate = rng.uniform(0, 2 * np.pi), rng.uniform(0.02, 0.1)
        envelope = -4.0 + 2.0 * np.sin(rate * t + phase + bins / 12.0) - bins / 40.0
        noise = 0.1 * rng.standard_normal((mel_frames, n_mels))
        mel[i, : mel_lens[i]] = (envelope + noise)[: mel_lens[i]]
    ids = np.array([f"synthetic-{seed}-{i}" for i in range(batch_size)], dtype=object)
    return {
        "id": tf.constant(ids, tf.string),
        "tokens": tf.constant(tokens),
        "mel": tf.constant(mel),
        "text_len": tf.constant(text_lens),
        "mel_len": tf.constant(mel_lens),
    }


__all__ = [
    "MODEL_PRESETS",
    "AdamW",
    "DynamicLossScale",
    "ModelConfig",
    "StepConfig",
    "TTSModel",
    "TrainStep",
    "make_synthetic_batch",
    "make_train_step",
]
