"""A user's batch read whatever its structure (measure/batch_spec.py) and its padding measured
(measure/speech.py): tuple, dict, nested dict and ragged batches; a length tensor that says the padded
length for every sample checked against the content; the user's naming refused when it does not fit."""

import argparse

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.data.audio import MelConfig
from perfsuite.measure.batch_spec import (
    BatchSpec,
    BatchSpecError,
    describe_structure,
    find_layout,
    parse_batch_spec,
)
from perfsuite.measure.speech import (
    CONTENT,
    LENGTH_TENSOR,
    RAGGED,
    FrameCounter,
    content_lengths,
    measure_batch,
)
from perfsuite.options import batch_spec, frame_hop
from perfsuite.verdict.pipeline_findings import (
    FIXED_PADDING_WASTE,
    fixed_padding_finding,
    layout_finding,
    speech_finding,
)

PAD = -11.5  # a log floor: the padding value of a log-mel
RNG = np.random.default_rng(7)


def mel_batch(lengths, time_axis=None, bins=8, pad=PAD):
    """[batch, time, bins] with each sample's first `length` frames random, the rest `pad`."""
    time_axis = time_axis or max(lengths)
    mel = np.full((len(lengths), time_axis, bins), pad, np.float32)
    for i, length in enumerate(lengths):
        mel[i, :length] = RNG.normal(size=(length, bins))
    return mel


def tts_tuple(lengths, time_axis=None, mel_len=None):
    """(tokens, mel, text_len, mel_len) as public TF TTS recipes batch them."""
    mel = mel_batch(lengths, time_axis)
    text_len = np.array([max(1, n // 6) for n in lengths], np.int32)
    tokens = np.zeros((len(lengths), int(text_len.max())), np.int32)
    return tokens, mel, text_len, np.asarray(lengths if mel_len is None else mel_len, np.int32)


# ------------------------------------------------------------------------------ the layout


def test_a_tuple_batch_is_read_by_the_rule_and_says_which_rule_chose_what():
    layout = find_layout(tts_tuple([30, 50, 70, 40]))
    assert (layout.mel, layout.mel_len) == ("1", "3")
    assert "largest value equals the time axis" in layout.length_rule
    assert "'1'" in layout.words() and "'3'" in layout.words() and "perfsuite's mel definition" in layout.words()
    config = MelConfig()
    assert layout.frame_s == config.hop_length / config.sample_rate


def test_a_length_tensor_below_a_fixed_time_axis_is_found_by_its_total_not_by_position():
    # text_len sits nearer the mel than mel_len; neither reaches the fixed time axis
    layout = find_layout(tts_tuple([30, 50, 70, 40], time_axis=128))
    assert layout.mel_len == "3" and "largest total" in layout.length_rule


def test_dict_and_nested_dict_batches_name_their_paths():
    lengths = [12, 20, 7]
    flat = find_layout({"mel": mel_batch(lengths), "mel_len": np.array(lengths), "text_len": np.array([3, 4, 2]),
                        "speaker": np.zeros((3, 16), np.float32)})
    assert (flat.mel, flat.mel_len) == ("mel", "mel_len") and "named after the audio" in flat.length_rule
    nested = find_layout({"features": {"mel": mel_batch(lengths), "n": np.array(lengths)},
                          "text": {"ids": np.zeros((3, 5), np.int32)}})
    assert (nested.mel, nested.mel_len) == ("features/mel", "features/n")


def test_the_largest_float_tensor_is_the_audio():
    batch = (np.zeros((4, 10, 2), np.float32), mel_batch([40, 30, 20, 10]), np.array([40, 30, 20, 10]))
    layout = find_layout(batch)
    assert layout.mel == "1" and "largest" in layout.mel_rule


def test_a_ragged_batch_reads_its_row_lengths_and_holds_no_padding():
    tf = pytest.importorskip("tensorflow")
    lengths = [5, 9, 2]
    ragged = tf.RaggedTensor.from_row_lengths(tf.ones([sum(lengths), 4]), lengths)
    batch = {"mel": ragged, "id": tf.range(3)}
    layout = find_layout(batch)
    assert layout.mel == "mel" and layout.ragged and layout.mel_len is None
    frames = measure_batch(batch, layout)
    assert (frames.real, frames.padded, frames.source) == (sum(lengths), sum(lengths), RAGGED)


def test_nothing_qualifies_is_said_with_the_structure_never_skipped():
    layout = find_layout((np.zeros((4, 7), np.int32), np.array([1, 2, 3, 4])))
    assert layout.mel is None and "a tuple (0: int32 [4, 7], 1: int64 [4])" in layout.mel_rule
    finding = layout_finding(layout)
    assert "no audio-s/s or padding efficiency" in finding.finding and "--batch-spec" in finding.recommendation
    counter = FrameCounter(layout=layout)
    assert counter((np.zeros((4, 7), np.int32), np.array([1, 2, 3, 4]))) == 4 and counter.figures() is None


def test_no_length_tensor_means_lengths_from_the_content():
    layout = find_layout((mel_batch([10, 6, 3]),))
    assert layout.mel_len is None and "from the content" in layout.length_rule
    frames = measure_batch((mel_batch([10, 6, 3]),), layout)
    assert (frames.real, frames.source) == (19, CONTENT)


@given(st.sampled_from(["tuple", "dict", "nested"]), st.lists(st.integers(2, 60), min_size=1, max_size=6))
def test_any_structure_finds_the_audio_and_its_true_lengths(shape, lengths):
    tokens, mel, text_len, mel_len = tts_tuple(lengths)
    batch, paths = {
        "tuple": ((tokens, mel, text_len, mel_len), ("1", "3")),
        "dict": ({"text": tokens, "audio": mel, "text_len": text_len, "frames": mel_len}, ("audio", "frames")),
        "nested": ({"inputs": {"ids": tokens, "n": text_len}, "targets": {"mel": mel, "mel_len": mel_len}},
                   ("targets/mel", "targets/mel_len")),
    }[shape]
    layout = find_layout(batch)
    assert (layout.mel, layout.mel_len) == paths
    frames = measure_batch(batch, layout)
    assert (frames.real, frames.padded) == (sum(lengths), len(lengths) * max(lengths))


# ------------------------------------------------------------------------------ the user's naming


def test_the_user_names_components_by_tuple_index_or_dict_path():
    batch = tts_tuple([30, 50, 70, 40])
    layout = find_layout(batch, parse_batch_spec("mel=1,mel_len=2"))  # the user's word wins over the rule
    assert (layout.mel, layout.mel_len) == ("1", "2") and layout.length_rule == "named by the batch spec"
    nested = {"features": {"mel": mel_batch([4, 6]), "len": np.array([4, 6])}}
    assert find_layout(nested, parse_batch_spec("mel=features/mel,mel_len=features/len")).mel_len == "features/len"


@pytest.mark.parametrize("spec, expected", [
    ("mel=0", "floating-point tensor of rank >= 2"),
    ("mel=9", "a component at that path"),
    ("mel=1,mel_len=0", "rank-1 integer tensor of 4 values"),
])
def test_a_spec_that_does_not_fit_names_the_structure_found(spec, expected):
    with pytest.raises(BatchSpecError, match=expected) as error:
        find_layout(tts_tuple([30, 50, 70, 40]), parse_batch_spec(spec))
    assert describe_structure(tts_tuple([30, 50, 70, 40])) in str(error.value)


@pytest.mark.parametrize("text", ["mel", "mel=", "audio=1", "mel=1,mel=2", "mel=1,mel_len=1", "mel=a//b"])
def test_bad_spec_syntax_is_refused_when_parsed(text):
    with pytest.raises(ValueError):
        parse_batch_spec(text)
    with pytest.raises(argparse.ArgumentTypeError):
        batch_spec(text)


def test_the_frame_hop_is_given_in_seconds_or_as_hop_over_rate():
    assert frame_hop("0.0125") == 0.0125 and frame_hop("256/22050") == 256 / 22050
    for bad in ("0", "-1", "a/b", "256/0", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            frame_hop(bad)
    layout = find_layout(tts_tuple([3, 5]), BatchSpec(frame_s=0.0125))
    assert layout.frame_s == 0.0125 and layout.frame_source == "given"


# ------------------------------------------------------------------------------ padding measured


@given(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=8), st.integers(0, 20),
       st.sampled_from([0.0, PAD, 1.0]))
def test_content_lengths_find_the_padding_whatever_its_value(lengths, extra, pad):
    mel = mel_batch(lengths, max(lengths) + extra, pad=pad)
    np.testing.assert_array_equal(content_lengths(mel), lengths)


def test_a_last_frame_that_is_not_repeated_is_no_padding():
    mel = RNG.normal(size=(2, 9, 4)).astype(np.float32)  # no frame repeats: every frame is speech
    np.testing.assert_array_equal(content_lengths(mel), [9, 9])


@given(st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=6), st.integers(2, 20))
def test_pad_frames_constant_in_time_are_padding_whatever_the_per_bin_values(lengths, extra):
    """A mel normalised per bin after padding: each pad frame holds the same per-bin values, not one value."""
    per_bin = RNG.normal(size=4).astype(np.float32)
    mel = RNG.normal(size=(len(lengths), max(lengths) + extra, 4)).astype(np.float32)
    for row, length in enumerate(lengths):
        mel[row, length:] = per_bin
    np.testing.assert_array_equal(content_lengths(mel), lengths)


def test_the_time_axis_is_the_one_that_varies_or_that_a_length_tensor_names():
    bins_first = (np.zeros((2, 80, 300), np.float32), np.array([300, 120], np.int32))
    layout = find_layout(bins_first)
    assert layout.axis == 2 and layout.time_axis == 300 and "length tensor" in layout.axis_rule
    varying = find_layout(np.zeros((2, 80, 300), np.float32), more=(np.zeros((2, 80, 250), np.float32),))
    assert varying.axis == 2 and "differs between" in varying.axis_rule
    assumed = find_layout(np.zeros((2, 300, 80), np.float32))
    assert assumed.axis == 1 and assumed.axis_rule.startswith("assumed")


def test_a_length_tensor_at_the_padded_length_is_checked_against_the_content():
    # the TTS pitfall: every clip padded to 1024 frames before its features, and mel_len = 1024 for all
    lengths = [300, 500, 700, 900]
    batch = tts_tuple(lengths, time_axis=1024, mel_len=[1024] * 4)
    counter = FrameCounter(layout=find_layout(batch))
    assert counter(batch) == 4
    padding = counter.figures()
    assert padding.real_frames == sum(lengths) and padding.padded_frames == 4 * 1024
    assert padding.sources == {CONTENT: 1} and padding.lengths_at_padded == 1
    assert padding.beyond_longest == pytest.approx(1 - 900 / 1024)
    words = speech_finding(None, padding).finding
    assert "content: trailing frames equal to the clip's last" in words and "said the padded length" in words


def test_a_length_tensor_at_the_padded_length_is_kept_when_the_content_agrees():
    batch = tts_tuple([64, 64], time_axis=64)  # every clip really as long as the batch
    frames = measure_batch(batch, find_layout(batch))
    assert (frames.real, frames.source, frames.lengths_at_padded) == (128, LENGTH_TENSOR, True)


def test_true_lengths_are_trusted():
    batch = tts_tuple([30, 50, 70, 40], time_axis=70)
    frames = measure_batch(batch, find_layout(batch))
    assert (frames.real, frames.padded, frames.source) == (190, 280, LENGTH_TENSOR)


def test_perfsuites_own_dict_batches_are_read_as_before():
    counter = FrameCounter()
    assert counter({"mel": np.zeros((2, 5, 3)), "mel_len": np.array([5, 2])}) == 2
    assert (counter.real, counter.padded, counter.batches) == ([7], [10], [])


# ------------------------------------------------------------------------------ fixed padding named


def counted(batches):
    counter = FrameCounter(layout=find_layout(batches[0]))
    for batch in batches:
        counter(batch)
    return counter.figures()


def test_padding_to_a_fixed_length_is_named_with_its_measured_waste():
    batches = [tts_tuple(RNG.integers(100, 600, 8).tolist(), time_axis=1024, mel_len=[1024] * 8) for _ in range(3)]
    finding = fixed_padding_finding(counted(batches), ("padded_batch PaddedBatchDatasetV2/_1 ([1024, 80])",))
    assert finding is not None and finding.topic == "fixed-padding"
    assert "fixed 1024 frames" in finding.finding and "content: trailing frames equal to the clip's last" in finding.finding
    assert finding.evidence["beyond_longest"] >= 1 - 600 / 1024 and finding.recommendation


def test_no_fixed_padding_finding_when_each_batch_is_padded_to_its_longest():
    batches = [tts_tuple(RNG.integers(100, 600, 8).tolist()) for _ in range(3)]
    padding = counted(batches)
    assert padding.beyond_longest == 0 < padding.efficiency < 1 and padding.sources == {LENGTH_TENSOR: 3}
    assert fixed_padding_finding(padding, ()) is None


def test_fixed_padding_in_the_graph_without_batches_is_named_without_a_figure():
    finding = fixed_padding_finding(None, ("padded_batch X ([1024, 80])",), "no audio component")
    assert "not measured: no audio component" in finding.finding and finding.recommendation is None
    assert fixed_padding_finding(None, ()) is None
    assert FIXED_PADDING_WASTE < 1 - 600 / 1024


# ------------------------------------------------------------------------------ the command line

TUPLE_PIPELINE = """
import tensorflow as tf


def make():
    mel = tf.random.stateless_normal([16, 40, 8], seed=[1, 2])
    tokens = tf.zeros([16, 5], tf.int32)
    rows = (tokens, mel, tf.fill([16], 5), tf.fill([16], 40))
    return tf.data.Dataset.from_tensor_slices(rows).batch(4).repeat()
"""


@pytest.mark.parametrize("argv, expected", [
    (["--batch-spec", "mel"], "--batch-spec: expected mel=PATH"),
    (["--frame-hop-s", "256/0"], "--frame-hop-s: expected seconds per frame"),
])
def test_bad_options_are_usage_errors_when_parsed(capsys, argv, expected):
    from perfsuite.tools import cli

    assert cli.main(["diagnose", "--pipeline", "m:f", *argv]) == 2
    assert expected in capsys.readouterr().err


def test_batch_spec_and_frame_hop_need_a_pipeline(capsys, tmp_path):
    from perfsuite.tools import cli

    assert cli.main(["diagnose", str(tmp_path), "--batch-spec", "mel=1"]) == 2
    assert "--batch-spec: expected with --pipeline" in capsys.readouterr().err


def test_a_spec_that_does_not_fit_the_users_batches_is_one_line_naming_their_structure(capsys, tmp_path):
    from perfsuite.tools import cli

    module = tmp_path / "tuple_pipeline.py"
    module.write_text(TUPLE_PIPELINE, encoding="utf-8")
    code = cli.main(["diagnose", "--pipeline", f"{module}:make", "--batch-spec", "mel=0", "--budget", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert ("error: --batch-spec mel=0: expected a floating-point tensor of rank >= 2 (batch, time, ...), found int32 "
            "[4, 5]; the batches are a tuple (0: int32 [4, 5], 1: float32 [4, 40, 8], 2: int32 [4], 3: int32 [4])") in err
