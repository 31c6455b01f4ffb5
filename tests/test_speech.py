"""Speech units: audio-seconds per second and padding efficiency from a batch's true lengths."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite.measure.speech import FrameCounter, speech_figures


@given(st.lists(st.integers(min_value=1, max_value=500), min_size=1, max_size=32))
def test_counter_notes_real_and_padded_frames(lengths):
    batch = {"mel": np.zeros((len(lengths), max(lengths), 4), np.float32), "mel_len": np.array(lengths)}
    counter = FrameCounter()
    assert counter(batch) == len(lengths)
    assert counter.real == [sum(lengths)] and counter.padded == [len(lengths) * max(lengths)]
    figures = speech_figures(real_frames=counter.real[0], padded_frames=counter.padded[0], frame_s=0.01,
                             seconds=2.0)
    assert 0 < figures.padding_efficiency <= 1
    assert figures.audio_s == pytest.approx(sum(lengths) * 0.01)
    assert figures.audio_s_per_s == pytest.approx(figures.audio_s / 2.0)


def test_a_batch_without_lengths_counts_samples_only():
    counter = FrameCounter()
    assert counter(np.zeros((5, 3))) == 5 and counter.real == []


def test_bad_durations_are_refused():
    with pytest.raises(ValueError, match="positive"):
        speech_figures(real_frames=1, padded_frames=0, frame_s=0.01, seconds=1.0)
