"""The TTS training step: it trains, its modes agree, padding never counts, shapes trace as promised."""

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.workload.model import (
    MODEL_PRESETS,
    AdamW,
    DynamicLossScale,
    ModelConfig,
    StepConfig,
    TTSModel,
    make_synthetic_batch,
    make_train_step,
)

tf = tensorflow()

TINY = MODEL_PRESETS["tiny"]
SHAPES = (4, 12, 30)  # batch, text tokens, mel frames


def tiny_batch(seed=0, batch_size=4, text_len=12, mel_frames=30):
    return make_synthetic_batch(batch_size=batch_size, text_len=text_len, mel_frames=mel_frames, seed=seed)


def first_losses(step, batch, n=2):
    return [float(step.step(batch)) for _ in range(n)]


def test_loss_decreases_on_a_fixed_batch():
    step = make_train_step(model_config=TINY, mode="graph", input_shapes=SHAPES)
    batch = tiny_batch()
    losses = [float(step.step(batch)) for _ in range(25)]
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.fixture(scope="module")
def eager_fp32_losses():
    """The reference: the first three losses of the eager fp32 step on tiny_batch(), seed 0."""
    return first_losses(make_train_step(model_config=TINY, mode="eager"), tiny_batch(), 3)


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_graph_and_xla_agree_with_eager_from_the_same_seed(mode, eager_fp32_losses):
    step = make_train_step(model_config=TINY, mode=mode, input_shapes=SHAPES)
    # The first loss is the forward pass alone; the later ones also check the gradients and AdamW.
    np.testing.assert_allclose(first_losses(step, tiny_batch(), 3), eager_fp32_losses, rtol=1e-4)
    assert eager_fp32_losses[2] < eager_fp32_losses[0]


@pytest.mark.slow  # tens of seconds (processes, an XLA compile): the unit run stays within 5 minutes
def test_mixed_float16_compiles_with_xla_and_matches_fp32(eager_fp32_losses):
    step = make_train_step(model_config=TINY, mode="xla", precision="mixed_float16", input_shapes=SHAPES)
    losses = first_losses(step, tiny_batch(), 3)
    np.testing.assert_allclose(losses, eager_fp32_losses, rtol=1e-2)
    assert all(v.dtype == tf.float32 for v in step.variables)
    assert float(step.loss_scale.scale) == 2.0**15  # finite steps keep the scale until growth_interval


def test_mixed_float16_graph_skips_a_non_finite_step_and_halves_the_scale(eager_fp32_losses):
    batch = tiny_batch()
    step = make_train_step(model_config=TINY, mode="graph", precision="mixed_float16", input_shapes=SHAPES)
    before = [v.numpy() for v in step.variables]
    step.loss_scale.scale.assign(3e38)  # the scaled loss overflows float32: every gradient is inf or NaN
    loss = step.step(batch)
    assert float(loss) == pytest.approx(eager_fp32_losses[0], rel=1e-2)
    assert float(step.loss_scale.scale) == pytest.approx(1.5e38)
    assert int(step.optimizer.iterations) == 0
    for old, var in zip(before, step.variables):
        np.testing.assert_array_equal(var.numpy(), old, err_msg=var.name)

    step.loss_scale.scale.assign(2.0**15)
    losses = first_losses(step, batch, 3)
    # Same trajectory as fp32, which also shows the gradients were unscaled before AdamW and clipping.
    np.testing.assert_allclose(losses, eager_fp32_losses, rtol=1e-2)
    assert int(step.optimizer.iterations) == 3


def test_dynamic_loss_scale_grows_after_a_run_of_finite_steps():
    scale = DynamicLossScale(initial_scale=8.0, growth_interval=3)
    for expected in (8.0, 8.0, 16.0, 16.0, 16.0, 32.0):
        scale.update(tf.constant(True))
        assert float(scale.scale) == expected
    scale.update(tf.constant(False))
    assert (float(scale.scale), int(scale.good_steps)) == (16.0, 0)


def test_adamw_matches_the_reference_formula():
    var = tf.Variable([[1.0, -2.0], [0.5, 3.0]])
    bias = tf.Variable([0.5, -0.5])
    opt = AdamW([var, bias], learning_rate=0.1, weight_decay=0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-8)
    grad_w, grad_b = np.array([[0.1, -0.2], [0.3, 0.0]], np.float32), np.array([1.0, -1.0], np.float32)
    expected_w, expected_b = var.numpy().copy(), bias.numpy().copy()
    m_w, v_w, m_b, v_b = 0.0, 0.0, 0.0, 0.0
    for t in (1, 2):
        opt.apply([tf.constant(grad_w), tf.constant(grad_b)], [var, bias])
        m_w, v_w = 0.9 * m_w + 0.1 * grad_w, 0.98 * v_w + 0.02 * grad_w**2
        m_b, v_b = 0.9 * m_b + 0.1 * grad_b, 0.98 * v_b + 0.02 * grad_b**2
        step_size = 0.1 * np.sqrt(1 - 0.98**t) / (1 - 0.9**t)
        expected_w -= step_size * m_w / (np.sqrt(v_w) + 1e-8) + 0.1 * 0.01 * expected_w
        expected_b -= step_size * m_b / (np.sqrt(v_b) + 1e-8)  # no decay on vectors
    np.testing.assert_allclose(var.numpy(), expected_w, rtol=1e-5)
    np.testing.assert_allclose(bias.numpy(), expected_b, rtol=1e-5)


def test_loss_ignores_padding_in_mel_and_tokens():
    model = TTSModel(TINY, seed=3)
    batch = {k: v.numpy() for k, v in tiny_batch(seed=1).items() if k != "id"}
    assert batch["mel_len"].min() < SHAPES[2] and batch["text_len"].min() < SHAPES[1]
    base = float(model.loss(batch, tf.float32))

    noisy = {k: v.copy() for k, v in batch.items()}
    rng = np.random.default_rng(7)
    for i in range(SHAPES[0]):
        frames, tokens = batch["mel_len"][i], batch["text_len"][i]
        noisy["mel"][i, frames:] = rng.normal(5.0, 3.0, size=(SHAPES[2] - frames, TINY.n_mels))
        noisy["tokens"][i, tokens:] = rng.integers(1, TINY.vocab_size, size=SHAPES[1] - tokens)
    assert not np.array_equal(noisy["mel"], batch["mel"])
    assert float(model.loss(noisy, tf.float32)) == pytest.approx(base, rel=1e-6)

    # The same kind of change inside the lengths does change the loss.
    changed = {k: v.copy() for k, v in batch.items()}
    changed["mel"][1, 0] += 1.0
    assert float(model.loss(changed, tf.float32)) != pytest.approx(base, rel=1e-6)
    changed = {k: v.copy() for k, v in batch.items()}
    changed["tokens"][1, 0] = (changed["tokens"][1, 0] % (TINY.vocab_size - 1)) + 1
    assert float(model.loss(changed, tf.float32)) != pytest.approx(base, rel=1e-6)


def test_static_signature_traces_once_for_batches_of_one_padded_shape():
    step = make_train_step(model_config=TINY, mode="graph", input_shapes=SHAPES)
    for seed in range(3):
        step.step(tiny_batch(seed=seed))
    assert step.tracing_count() == 1


def test_dynamic_shapes_retrace_for_each_new_padded_shape():
    step = make_train_step(model_config=TINY, mode="graph", input_shapes=None)
    step.step(tiny_batch(text_len=12, mel_frames=30))
    step.step(tiny_batch(text_len=10, mel_frames=24))
    step.step(tiny_batch(seed=5, text_len=12, mel_frames=30))
    assert step.tracing_count() == 2


def test_partial_last_batch_with_a_free_batch_dimension_does_not_retrace():
    step = make_train_step(model_config=TINY, mode="graph", input_shapes=(None, 12, 30))
    step.step(tiny_batch(batch_size=4))
    loss = step.step(tiny_batch(batch_size=3))
    assert np.isfinite(float(loss))
    assert step.tracing_count() == 1


def test_fixed_batch_dimension_rejects_a_partial_batch_by_name():
    step = make_train_step(model_config=TINY, mode="graph", input_shapes=SHAPES)
    with pytest.raises(ValueError, match=r"batch\['tokens'\].*\(4, 12\).*\(3, 12\)"):
        step.step(tiny_batch(batch_size=3))
    with pytest.raises(ValueError, match=r"batch\['mel'\]"):
        step.step(tiny_batch(mel_frames=31))


def test_eager_mode_has_no_tracing_count():
    assert make_train_step(model_config=TINY, mode="eager").tracing_count() is None


def test_same_seed_same_weights_other_seed_other_weights():
    a, b, c = (make_train_step(model_config=TINY, seed=s).variables for s in (0, 0, 1))
    assert len(a) == len(b) > 10
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert not np.array_equal(a[0].numpy(), c[0].numpy())


def test_missing_batch_key_is_named():
    step = make_train_step(model_config=TINY)
    batch = dict(tiny_batch())
    del batch["mel_len"]
    with pytest.raises(KeyError, match="mel_len"):
        step.step(batch)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "jit"}, "StepConfig.mode.*'jit'"),
        ({"precision": "bf16"}, "StepConfig.precision.*'bf16'"),
        ({"input_shapes": (4, 12)}, r"StepConfig.input_shapes.*\(4, 12\)"),
        ({"input_shapes": (4, 0, 30)}, "StepConfig.input_shapes"),
    ],
)
def test_step_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StepConfig(**kwargs)


def test_model_config_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(ValueError, match="d_model=30, num_heads=4"):
        ModelConfig(d_model=30, num_heads=4)


def test_synthetic_batch_format():
    batch = make_synthetic_batch(batch_size=5, text_len=9, mel_frames=20, seed=4)
    again = make_synthetic_batch(batch_size=5, text_len=9, mel_frames=20, seed=4)
    assert batch["id"].dtype == tf.string and batch["id"].shape == (5,)
    assert (batch["tokens"].dtype, batch["tokens"].shape) == (tf.int32, (5, 9))
    assert (batch["mel"].dtype, batch["mel"].shape) == (tf.float32, (5, 20, 80))
    assert batch["text_len"].dtype == batch["mel_len"].dtype == tf.int32
    tokens, mel = batch["tokens"].numpy(), batch["mel"].numpy()
    for i, (t, f) in enumerate(zip(batch["text_len"].numpy(), batch["mel_len"].numpy())):
        assert 1 <= t <= 9 and 2 <= f <= 20
        assert (tokens[i, :t] > 0).all() and (tokens[i, t:] == 0).all()  # 0 is PAD_ID
        assert (mel[i, f:] == 0).all() and (mel[i, :f] != 0).any()
    assert int(batch["text_len"][0]) == 9 and int(batch["mel_len"][0]) == 20
    np.testing.assert_array_equal(mel, again["mel"].numpy())
