"""Speech units: audio-seconds per second and the padding efficiency of batches.

Speech people think in seconds of audio, not samples: a batch of 16 one-second clips and one of 16
ten-second clips are not the same work. A padded batch also computes on its padding. Both figures come
from a batch's true lengths (frames) and its padded shape ([batch, frames, ...]). Which component holds
the audio and which its lengths is a ``batch_spec.BatchLayout``; without one, dict batches with ``mel``
and ``mel_len`` keys (perfsuite's own loaders).

Where the lengths come from (``BatchFrames.source``): the length tensor; except where it says the padded
length for every sample of a batch (the lengths were lost, e.g. every clip padded to a fixed length before
its features were computed): then the content, trailing frames equal to the clip's last frame bin by bin
(``content_lengths``), whenever it finds any; the row lengths of a ragged batch (no padding); the content where no length tensor fits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsuite.measure.batch_spec import BatchLayout, leaves
from perfsuite.measure.timing import leading_dim
from perfsuite.records import Record

LENGTH_TENSOR = "length tensor"
CONTENT = "content: trailing frames equal to the clip's last"
RAGGED = "ragged row lengths"


def content_lengths(audio: np.ndarray) -> np.ndarray:
    """Per sample of a [batch, time, ...] array: the frames before its trailing pad frames. Pad frames are
    constant in time: each equals the sample's last frame bin by bin, whatever the values across bins (zeros,
    a log floor, a mel normalised per bin). The run counts when it is at least two frames, or one frame
    constant across bins (a single frame equal to itself says nothing); trailing silence at a constant floor
    counts as padding, which the step computes on all the same."""
    audio = np.asarray(audio)
    if audio.ndim < 2:
        raise ValueError(f"audio: expected an array [batch, time, ...], found shape {audio.shape}")
    if audio.shape[1] == 0:
        return np.zeros(audio.shape[0], np.int64)
    frames = audio.reshape(audio.shape[0], audio.shape[1], int(np.prod(audio.shape[2:], dtype=np.int64)))
    last = frames[:, -1:, :]
    constant = np.all(last == last[:, :, :1], axis=(1, 2))
    pad = np.all(frames == last, axis=2)  # [batch, time]: the frame equals the sample's last frame
    trailing = np.argmin(pad[:, ::-1], axis=1)  # the run of pad frames at the end ...
    trailing = np.where(pad.all(axis=1), frames.shape[1], trailing)  # ... or every frame
    padded = constant | (trailing >= 2)
    return np.where(padded, frames.shape[1] - trailing, frames.shape[1]).astype(np.int64)


@dataclass(frozen=True)
class BatchFrames(Record):
    """One batch's frames: samples, real (true frames, summed), padded (samples x time axis), longest
    (samples x the longest true length: the batch padded to its longest), time_axis, source (where the
    true lengths came from: LENGTH_TENSOR, CONTENT or RAGGED), lengths_at_padded (the length tensor said
    the padded length for every sample)."""

    samples: int
    real: int
    padded: int
    longest: int
    time_axis: int
    source: str
    lengths_at_padded: bool


def measure_batch(batch: Any, layout: BatchLayout) -> BatchFrames | None:
    """The BatchFrames of a batch read by layout; None when the layout found no audio component."""
    if layout.mel is None:
        return None
    parts = dict(leaves(batch))
    audio = parts[layout.mel]
    if layout.ragged:
        lengths = np.asarray(audio.row_lengths())
        return _frames(lengths, int(lengths.max(initial=0)), RAGGED, at_padded=False, padded=int(lengths.sum()))
    audio = layout.time_first(audio)
    time_axis = audio.shape[1]
    if layout.mel_len is None:
        return _frames(content_lengths(audio), time_axis, CONTENT, at_padded=False)
    given = np.asarray(parts[layout.mel_len]).astype(np.int64)
    lengths = _true_lengths(batch, layout, audio)
    at_padded = bool(given.size) and bool(np.all(given == time_axis))
    source = CONTENT if np.any(lengths != given) else LENGTH_TENSOR  # content read only when at_padded
    return _frames(lengths, time_axis, source, at_padded=at_padded)


def _frames(lengths: np.ndarray, time_axis: int, source: str, *, at_padded: bool,
            padded: int | None = None) -> BatchFrames:
    longest = int(lengths.max(initial=0))
    return BatchFrames(samples=int(lengths.size), real=int(lengths.sum()),
                       padded=int(lengths.size * time_axis) if padded is None else padded,
                       longest=int(lengths.size * longest), time_axis=int(time_axis), source=source,
                       lengths_at_padded=at_padded)


@dataclass(frozen=True)
class PaddingFigures(Record):
    """The padding of the batches measured: efficiency = real / padded frames; to_longest = real / the
    frames of the same batches padded each to its longest; beyond_longest = the share of the padded frames
    past each batch's longest sample (0 when every batch is padded to its longest, large when padded to a
    fixed length); time_axes: the padded lengths seen; sources: batches per length source;
    lengths_at_padded: batches whose length tensor said the padded length for every sample."""

    batches: int
    real_frames: int
    padded_frames: int
    efficiency: float
    to_longest: float
    beyond_longest: float
    time_axes: tuple[int, ...]
    sources: dict[str, int]
    lengths_at_padded: int

    def source_words(self) -> str:
        """'length tensor' or 'content: trailing frames equal to the clip's last (12 of 16 batches), length tensor (4)'."""
        if len(self.sources) == 1:
            return next(iter(self.sources))
        ranked = sorted(self.sources.items(), key=lambda item: -item[1])
        return ", ".join(f"{name} ({count} of {self.batches} batches)" for name, count in ranked)


def padding_figures(frames: list[BatchFrames]) -> PaddingFigures | None:
    """The PaddingFigures of measured batches; None when there are none (or they hold no frames)."""
    padded = sum(f.padded for f in frames)
    if not frames or padded <= 0:
        return None
    real, longest = sum(f.real for f in frames), sum(f.longest for f in frames)
    return PaddingFigures(batches=len(frames), real_frames=real, padded_frames=padded, efficiency=real / padded,
                          to_longest=real / longest if longest else 1.0,
                          beyond_longest=max(0, padded - longest) / padded,
                          time_axes=tuple(sorted({f.time_axis for f in frames})),
                          sources=dict(Counter(f.source for f in frames)),
                          lengths_at_padded=sum(f.lengths_at_padded for f in frames))


@dataclass
class FrameCounter:
    """A ``samples_in`` for the timing loops that also notes each batch's real and padded mel frames.

    With a layout, every batch is read by it (``measure_batch``; its BatchFrames kept in ``batches``) and
    a batch without the audio counts samples only. Without one, dict batches with ``mel_len`` and ``mel``
    (perfsuite's loaders; the length tensor trusted); other batches count samples only."""

    real: list[int] = field(default_factory=list)
    padded: list[int] = field(default_factory=list)
    layout: BatchLayout | None = None
    batches: list[BatchFrames] = field(default_factory=list)

    def __call__(self, batch: Any) -> int:
        if self.layout is not None:
            return self._by_layout(batch)
        lengths = np.asarray(batch["mel_len"]) if isinstance(batch, dict) and "mel_len" in batch else None
        if lengths is not None and "mel" in batch:
            self.real.append(int(lengths.sum()))
            self.padded.append(int(lengths.size * batch["mel"].shape[1]))
        return int(lengths.size) if lengths is not None else leading_dim(batch)

    def _by_layout(self, batch: Any) -> int:
        frames = measure_batch(batch, self.layout)
        if frames is None:
            return leading_dim(batch)
        self.batches.append(frames)
        self.real.append(frames.real)
        self.padded.append(frames.padded)
        return frames.samples

    def figures(self) -> PaddingFigures | None:
        """The PaddingFigures of the batches read by layout so far (None without any)."""
        return padding_figures(self.batches)


@dataclass(frozen=True)
class SpeechFigures(Record):
    """audio_s_per_s: seconds of audio (real frames x frame duration) per second of steady wall time.
    padding_efficiency: real frames / padded frames of the steady batches (1.0: no padding)."""

    audio_s_per_s: float
    padding_efficiency: float
    audio_s: float


def speech_figures(*, real_frames: int, padded_frames: int, frame_s: float, seconds: float) -> SpeechFigures:
    """The figures of batches holding ``real_frames`` of ``padded_frames`` mel frames read in ``seconds``."""
    if seconds <= 0 or padded_frames <= 0:
        raise ValueError(f"seconds, padded_frames: expected positive values, found {seconds} and {padded_frames}")
    audio_s = real_frames * frame_s
    return SpeechFigures(audio_s_per_s=audio_s / seconds, padding_efficiency=real_frames / padded_frames,
                         audio_s=audio_s)


def canonical_batch(batch: Any, layout: BatchLayout) -> Any:
    """A batch as perfsuite's own loaders shape it, {'mel': the audio, 'mel_len': its true lengths as
    measure_batch finds them}, for readers that know only that shape (the emulated step); the batch
    itself when the layout found no audio. A ragged audio component is padded to its longest."""
    if layout.mel is None:
        return batch
    audio = dict(leaves(batch))[layout.mel]
    if layout.ragged:
        lengths, audio = np.asarray(audio.row_lengths()), audio.to_tensor()
    else:
        audio = layout.time_first(audio)
        lengths = _true_lengths(batch, layout, audio)
    return {"mel": audio, "mel_len": lengths}


def _true_lengths(batch: Any, layout: BatchLayout, audio: np.ndarray) -> np.ndarray:
    if layout.mel_len is None:
        return content_lengths(audio)
    lengths = np.asarray(dict(leaves(batch))[layout.mel_len]).astype(np.int64)
    if lengths.size and np.all(lengths == audio.shape[1]):
        measured = content_lengths(audio)
        if np.any(measured < audio.shape[1]):
            return measured
    return lengths
