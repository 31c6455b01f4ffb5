"""diagnose --pipeline's padding fix (tools/diagnose/padding.py): the pipeline's samples bucketed by length with
tf.data's bucket_by_sequence_length, every sample kept with its true length, each batch padded to its own
longest; the step's gain decided above 1.0 when its cost grows with frames, not when it does not."""

import importlib.util
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from perfsuite.measure.batch_spec import find_layout
from perfsuite.measure.speech import measure_batch, padding_figures
from perfsuite.measure.step_model import StepModel
from perfsuite.tools.diagnose.fixes import FixRounds, NotApplicable
from perfsuite.tools.diagnose.padding import PADDING_BATCHES, PaddingComparison, boundaries, bucketed
from perfsuite.tools.diagnose.plan import Budget, Stage, no_progress
from perfsuite.verdict.pipeline_findings import fix_verdicts

FIXED, BINS, BATCH, N = 64, 8, 4, 32
RECIPE = Path(__file__).parent / "pipelines" / "tts_recipe.py"


def _frames(i):
    return 6 + (i * 7) % 29  # 6..34 real frames


def _utterance(i):
    frames = 6 + tf.cast((i * 7) % 29, tf.int32)
    t = tf.cast(tf.range(frames), tf.float32)[:, None]
    mel = 1.0 + tf.cast(i, tf.float32) + 0.01 * t + 0.001 * tf.range(BINS, dtype=tf.float32)[None, :]
    tokens = tf.range(1, 4 + tf.cast(i % 5, tf.int32))
    return tokens, tf.pad(mel, [[0, FIXED - frames], [0, 0]]), tf.shape(tokens)[0], frames


def _pipeline(structure="tuple", fixed=True, n=N):
    """n utterances in batches of BATCH: a tuple (tokens, mel, text_len, mel_len) whose mel is padded to FIXED
    frames and whose length then says FIXED (the true length lost), or a nested dict whose length is true;
    fixed=False: padded to each batch's longest."""
    data = tf.data.Dataset.range(n).map(_utterance)
    if structure == "tuple":
        data = data.map(lambda tokens, mel, n, frames: (tokens, mel, n, tf.constant(FIXED)))
    else:
        data = data.map(lambda tokens, mel, n, frames: {"text": {"tokens": tokens, "len": n}, "mel": mel,
                                                        "mel_len": frames})
    if not fixed:
        data = data.map(_unpadded)
    return data.padded_batch(BATCH)


def _unpadded(*element):
    element = element[0] if len(element) == 1 else element
    if isinstance(element, dict):
        return {**element, "mel": element["mel"][:element["mel_len"]]}
    tokens, mel, n, _ = element
    frames = tf.reduce_sum(tf.cast(tf.reduce_any(mel != 0, axis=1), tf.int32))
    return tokens, mel[:frames], n, frames


def _parts(batch):
    if isinstance(batch, dict):
        return batch["text"]["tokens"], batch["mel"], batch["text"]["len"], batch["mel_len"]
    return batch


def _expected(n):
    return Counter((tuple(range(1, 4 + i % 5)), _frames(i)) for i in range(n))


def _held(batches):
    """The multiset of (tokens, true frames) the batches hold, read through their length tensors, with a
    check that each mel's values past its length are padding and its time axis its batch's longest."""
    held = Counter()
    for batch in batches:
        tokens, mel, text_len, mel_len = (np.asarray(x) for x in _parts(batch))
        assert mel.shape[1] == mel_len.max()  # padded to its own longest, not a fixed length
        for j in range(len(mel_len)):
            i = int(np.rint(mel[j, 0, 0] - 1.0))  # the utterance's index, from its first frame
            frames = int(mel_len[j])
            assert np.allclose(mel[j, :frames], np.asarray(_utterance(i)[1])[:frames])
            assert not mel[j, frames:].any()
            held[(tuple(tokens[j, :text_len[j]].tolist()), frames)] += 1
    return held


@pytest.mark.parametrize("structure", ["tuple", "dict"])
def test_the_bucketed_batches_hold_the_same_samples_each_padded_to_its_own_longest_with_true_lengths(structure):
    n = 36  # buckets partly filled: none of their samples dropped
    batches = list(_pipeline(structure, n=n))
    layout = find_layout(batches[0])
    out = bucketed(batches, layout, batch_size=BATCH)
    assert _held(out) == _expected(n)
    assert all(len(_parts(b)[1]) <= BATCH for b in out)
    assert type(out[0]) is type(batches[0])
    if structure == "dict":
        assert set(out[0]) == {"text", "mel", "mel_len"} and set(out[0]["text"]) == {"tokens", "len"}
        assert out[0]["mel_len"].dtype == batches[0]["mel_len"].dtype
    else:
        assert out[0][3].dtype == batches[0][3].dtype
    # bucketing pads less than padding each of the pipeline's batches to its longest
    to_longest = sum(len(f) * max(f) for f in ([_frames(i) for i in range(k, k + BATCH)] for k in range(0, n, BATCH)))
    assert sum(int(np.prod(_parts(b)[1].shape[:2])) for b in out) < to_longest


def test_the_boundaries_sit_at_the_quantiles_of_the_true_lengths():
    assert boundaries(np.arange(1, 101), 4) == [26, 51, 76]
    assert boundaries(np.full(10, 7), 4) == []  # one length: one bucket
    assert boundaries(np.arange(1, 101), 1) == []


def _padding(data):
    batches = list(data.take(PADDING_BATCHES))
    layout = find_layout(batches[0])
    return padding_figures([measure_batch(b, layout) for b in batches])


def _comparison(data, step, *, padding=None):
    """A PaddingComparison of data (repeated) as diagnose makes it: the layout and padding measured on its
    batches, or the padding given."""
    layout = find_layout(next(iter(data)))
    model = None if step is None else StepModel(step, name="--step test:make_step")
    return PaddingComparison(model, data.repeat(), "test:make_dataset", layout=layout,
                             padding=padding or _padding(data))


def _refused(comparison) -> str:
    with pytest.raises(NotApplicable) as refused:
        comparison.prepare()
    return str(refused.value)


def _any_step(batch):
    return tf.reduce_sum(_parts(batch)[1])


def test_the_fix_says_why_it_does_not_apply():
    assert "needs --step" in _refused(_comparison(_pipeline(), None))
    assert "no padding past each batch's longest" in _refused(_comparison(_pipeline(fixed=False), _any_step))
    padded = _padding(_pipeline())  # padding past each batch's longest: only the layout refuses below
    assert padded.beyond_longest > 0.3
    tokens_only = tf.data.Dataset.range(N).map(lambda i: (tf.range(i % 5 + 1),)).padded_batch(BATCH)
    assert "no audio component" in _refused(_comparison(tokens_only, _any_step, padding=padded))
    ragged = tf.data.Dataset.range(N).map(lambda i: _utterance(i)[1][: 6 + i % 7]).ragged_batch(BATCH)
    assert "ragged" in _refused(_comparison(ragged, _any_step, padding=padded))
    scalar = _pipeline().map(lambda *parts: (*parts, tf.constant(1.0)))
    assert "could not be split into samples" in _refused(_comparison(scalar, _any_step))


def test_a_step_that_refuses_the_bucketed_batches_is_named_in_one_line():
    @tf.function(input_signature=[tf.TensorSpec([None, FIXED, BINS], tf.float32)])
    def fixed_only(mel):
        return tf.reduce_sum(mel)

    why = _refused(_comparison(_pipeline(), lambda batch: fixed_only(batch[1])))
    assert why.startswith("the step refused the bucketed batches: ") and "\n" not in why
    assert "TypeError" in why or "ValueError" in why


def test_the_rate_is_samples_per_second_over_whole_passes_of_a_side(monkeypatch):
    """Each step call takes one second of a planted clock: 'before' is 16 batches of 4 samples, 'after' the same
    64 samples in 17 batches (n=36: partly filled buckets), so samples/s are 4 and 64/17, not steps/s."""
    from types import SimpleNamespace

    from perfsuite.measure import step_model

    now = [0.0]

    def step(batch):
        now[0] += 1.0
        return _parts(batch)[1]

    comparison = _comparison(_pipeline(n=36), step)
    comparison.prepare()
    monkeypatch.setattr(step_model, "time", SimpleNamespace(perf_counter_ns=lambda: int(now[0] * 1e9)))
    assert [len(comparison.sides[side]) for side in ("before", "after")] == [16, 17]
    assert comparison.rate("before", 0.0) == 64 / 16 and comparison.rate("after", 0.0) == 64 / 17
    assert comparison.rate("before", 20.0) == 2 * 64 / 32  # whole passes until read_s: two of 16 s
    assert "on 64 of the pipeline's samples" in comparison.unit


def _measured(step, n=N):
    comparison = _comparison(_pipeline(n=n), step)
    fixes = FixRounds(lambda stage: ([comparison], []))
    budget = Budget(30, {"fixes": 1.0}, time.monotonic)
    [gain] = fixes.run(Stage("fixes", 6.0, budget, no_progress))
    sides = {side: len(batches) for side, batches in comparison.sides.items()}
    fixes.close()
    [verdict] = fix_verdicts((gain,))
    return gain, verdict, sides


def test_a_step_whose_cost_grows_with_frames_gains_from_bucketing():
    def per_frame(batch):
        mel = _parts(batch)[1]
        time.sleep(2e-5 * mel.shape[0] * mel.shape[1])
        return mel

    gain, verdict, _ = _measured(per_frame)
    assert gain.applied and "samples/s of the step on" in gain.unit and "bucket_by_sequence_length" in gain.words
    assert gain.gain.decided and gain.gain.low > 1.0 and gain.gain.median > 1.5
    assert verdict.recommendation


def test_a_step_whose_cost_does_not_depend_on_frames_is_not_told_to_bucket():
    def per_call(batch):
        time.sleep(0.01)
        return _parts(batch)[1]

    gain, verdict, sides = _measured(per_call, n=36)
    assert sides["after"] > sides["before"]  # the same samples in more batches (partly filled): more steps
    assert gain.applied and gain.gain is not None and not (gain.gain.decided and gain.gain.low > 1.0)
    assert verdict.recommendation is None


def _recipe():
    spec = importlib.util.spec_from_file_location("tts_recipe_for_padding", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recipe_step_with_a_frame_cost_trains_its_per_frame_layers_on_bucketed_batches(monkeypatch):
    recipe = _recipe()
    batches = list(recipe.make_dataset(n="16", python="0", prefetch="0").take(4))
    out = bucketed(batches, find_layout(batches[0]), batch_size=4)
    assert max(b[1].shape[1] for b in out) < batches[0][1].shape[1] == recipe.FIXED_FRAMES
    monkeypatch.setenv("TTS_FIRST_CALL_S", "0")
    losses = {}
    for cost in ("0", "2"):
        monkeypatch.setenv("TTS_STEP_FRAME_COST", cost)
        step = recipe.make_step()
        losses[cost] = [float(step(batch)) for batch in out]
    assert losses["2"] != losses["0"]  # the layers are in the loss
    assert len(recipe._frame_layers(3)) == 3 and recipe._per_frame(out[0][1], recipe._frame_layers(3)).shape == (
        out[0][1].shape[0] * out[0][1].shape[1], 256)
