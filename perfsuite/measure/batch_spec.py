"""Which part of a user's batch is the audio (or mel) and which its lengths, whatever the batch's structure.

A user's batch may be a tuple ``(tokens, mel, text_len, mel_len)``, a dict, a nested dict, or hold ragged
tensors. ``find_layout`` names the audio component and its length component, by the user's ``BatchSpec``
where given, otherwise by the rules below, and says which rule chose what (``BatchLayout``):

* **The audio:** the largest floating-point tensor with a time axis: rank >= 2 (batch, time, ...), the
  most elements; ties go to the first in tf.nest order (dict keys sorted, tuples by index). A ragged
  float tensor qualifies; its row lengths are its lengths.
* **Its time axis:** the one axis (after the batch's) whose size differs between the batches read; else the
  one whose size equals the largest value of a length tensor that fits it (a batch padded to its longest,
  or a length tensor that says the padded length); else the only axis long enough for the largest length
  tensor's values; else axis 1, said to be assumed. A bins-first
  ``[batch, 80, time]`` mel reads its frames on axis 2.
* **Its lengths:** a rank-1 integer tensor with one value per sample, every value in [0, time axis].
  Where several qualify: a dict key beside the audio named after it (``mel`` -> ``mel_len``,
  ``mel_lens``, ``mel_length``, ``mel_lengths``), else the one whose largest value equals the time axis
  (a batch padded to its longest), else the one with the largest total (frames outnumber tokens).
  Where none qualifies, the lengths come from the content (``content_lengths``).
* **Paths** name components as tf.nest walks them: tuple indices and dict keys joined by '/', e.g.
  ``1`` or ``features/mel``; '' is a batch that is a single tensor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfsuite.data.audio import MelConfig
from perfsuite.errors import PerfsuiteError
from perfsuite.options import batch_spec_entries
from perfsuite.records import Record

LENGTH_SUFFIXES = ("_len", "_lens", "_length", "_lengths")
_PATH = re.compile(r"^[^/\s]+(/[^/\s]+)*$")


class BatchSpecError(PerfsuiteError, ValueError):
    """A BatchSpec that does not fit the batches: names the spec's entry, what it expected, and the batch
    structure found."""

    def __init__(self, entry: str, expected: str, structure: str):
        self.entry = entry
        self.expected = expected
        self.structure = structure
        super().__init__(f"--batch-spec {entry}: expected {expected}; the batches are {structure}")


@dataclass(frozen=True)
class BatchSpec(Record):
    """The user's word on their batches. mel: the path of the audio/mel component; mel_len: the path of its
    length tensor; frame_s: seconds of audio per frame (step along the time axis). None: chosen by the
    rules of this module (frame_s: perfsuite's mel definition, MelConfig's hop / sample rate)."""

    mel: str | None = None
    mel_len: str | None = None
    frame_s: float | None = None

    def __post_init__(self):
        for name in ("mel", "mel_len"):
            path = getattr(self, name)
            if path is not None and not (isinstance(path, str) and _PATH.match(path)):
                raise self.invalid((name,), "a path of tuple indices or dict keys joined by '/' (e.g. 1 or "
                                   "features/mel)", repr(path))
        if self.frame_s is not None and not (isinstance(self.frame_s, int | float) and self.frame_s > 0
                                             and math.isfinite(self.frame_s)):
            raise self.invalid(("frame_s",), "seconds per frame > 0", repr(self.frame_s))
        if self.mel is not None and self.mel == self.mel_len:
            raise self.invalid(("mel_len",), "a component other than mel", repr(self.mel_len))


def parse_batch_spec(text: str) -> BatchSpec:
    """A BatchSpec from 'mel=PATH[,mel_len=PATH]' (the --batch-spec option); ValueError names what is wrong."""
    return BatchSpec(**batch_spec_entries(text))


@dataclass(frozen=True)
class BatchLayout(Record):
    """Where the audio and its lengths are in a batch, and why. structure: the batch in words. mel / mel_len:
    component paths (None: not found; mel_len None: lengths from the content, or the ragged row lengths
    when ragged). mel_rule / length_rule: which rule chose each (or why none qualified). time_axis: the
    padded length of the audio in the batch it was chosen from. frame_s and frame_source: seconds per
    frame and where that figure came from."""

    structure: str
    mel: str | None
    mel_len: str | None
    mel_rule: str
    length_rule: str
    ragged: bool
    time_axis: int | None
    frame_s: float
    frame_source: str
    axis: int = 1  # which axis of the audio is time (1: [batch, time, ...])
    axis_rule: str = "assumed: axis 1, [batch, time, ...]"

    def time_first(self, audio: Any) -> np.ndarray:
        """The audio as a numpy array [batch, time, ...] (its time axis moved to 1)."""
        audio = np.asarray(audio)
        return audio if self.axis == 1 else np.moveaxis(audio, self.axis, 1)

    def words(self) -> str:
        """One line: what was chosen and why (printed by diagnose, recorded in its JSON)."""
        if self.mel is None:
            return f"no audio component: {self.mel_rule}"
        mel = f"audio {_shown(self.mel)} ({self.mel_rule})"
        lengths = (f"lengths {_shown(self.mel_len)} ({self.length_rule})" if self.mel_len is not None
                   else f"lengths {self.length_rule}")
        return (f"{mel}; time on axis {self.axis} ({self.axis_rule}); {lengths}; {self.frame_s:.4g} s per frame "
                f"({self.frame_source})")


def _shown(path: str) -> str:
    return repr(path) if path else "(the whole batch)"


# ------------------------------------------------------------------------------ the batch's parts


def leaves(batch: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, tensor) for every component of a batch: dicts by sorted key (tf.nest's order), tuples and
    lists by index."""
    if isinstance(batch, Mapping):
        for key in sorted(batch):
            yield from leaves(batch[key], f"{path}/{key}" if path else str(key))
    elif isinstance(batch, tuple | list):
        for index, item in enumerate(batch):
            yield from leaves(item, f"{path}/{index}" if path else str(index))
    else:
        yield path, batch


def _is_ragged(value: Any) -> bool:
    return hasattr(value, "row_lengths") and hasattr(value, "flat_values")


def _is_sparse(value: Any) -> bool:
    return hasattr(value, "dense_shape") and hasattr(value, "indices")


def _kind(value: Any) -> str:
    """'float', 'int' or 'other' by dtype (TensorFlow's or numpy's)."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return "other"
    if hasattr(dtype, "is_floating"):
        return "float" if dtype.is_floating else "int" if dtype.is_integer else "other"
    dtype = np.dtype(dtype)
    return "float" if np.issubdtype(dtype, np.floating) else "int" if np.issubdtype(dtype, np.integer) else "other"


def _shape(value: Any) -> tuple[int | None, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    if getattr(shape, "rank", 0) is None:
        return None
    return tuple(None if d is None else int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else shape))


def _dtype_name(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "name", str(dtype)) if dtype is not None else type(value).__name__


def describe(value: Any) -> str:
    """One component in words: 'float32 [8, 1024, 80]', 'float32 ragged [8, None, 80]'."""
    shape = _shape(value)
    dims = "[?]" if shape is None else "[" + ", ".join("None" if d is None else str(d) for d in shape) + "]"
    extra = " ragged" if _is_ragged(value) else " sparse" if _is_sparse(value) else ""
    return f"{_dtype_name(value)}{extra} {dims}"


def describe_structure(batch: Any) -> str:
    """The batch in words: 'a tuple (0: int32 [8, 57], 1: float32 [8, 1024, 80], ...)'."""
    parts = ", ".join(f"{path}: {describe(value)}" for path, value in leaves(batch))
    if isinstance(batch, Mapping):
        return f"a dict {{{parts}}}"
    if isinstance(batch, tuple | list):
        return f"a {type(batch).__name__} ({parts})"
    return f"a single tensor {describe(batch)}"


# ------------------------------------------------------------------------------ choosing the parts


def default_frame(rank: int | None) -> tuple[float, str]:
    """Seconds per frame and its source when the user gave none: perfsuite's mel definition (hop / sample
    rate) for a rank >= 3 component; one sample at perfsuite's sample rate for a rank-2 one (a waveform)."""
    config = MelConfig()
    if rank == 2:
        return 1 / config.sample_rate, (f"assumed, not given: perfsuite's sample rate, {config.sample_rate} Hz; the "
                                        "audio is rank 2, read as a waveform (--frame-hop-s gives yours)")
    return config.hop_length / config.sample_rate, (f"assumed, not given: perfsuite's mel definition, hop "
                                                   f"{config.hop_length} at {config.sample_rate} Hz (--frame-hop-s "
                                                   "gives yours)")


def find_layout(batch: Any, spec: BatchSpec | None = None, more: tuple = ()) -> BatchLayout:
    """The BatchLayout of a batch: by spec where it names a component (BatchSpecError when that
    component is missing or does not fit), otherwise by the module's rules. ``more``: other batches of the
    same pipeline, whose shapes show which axis varies (the time axis)."""
    spec = spec or BatchSpec()
    structure = describe_structure(batch)
    parts = dict(leaves(batch))
    mel, mel_rule = _choose_mel(parts, spec, structure)
    if mel is None:
        frame_s, source = (spec.frame_s, "given") if spec.frame_s else default_frame(None)
        return BatchLayout(structure=structure, mel=None, mel_len=None, mel_rule=mel_rule,
                           length_rule="none (no audio component)", ragged=False, time_axis=None,
                           frame_s=frame_s, frame_source=source)
    value = parts[mel]
    shape = _shape(value)
    ragged = _is_ragged(value)
    axis, axis_rule = (1, "a ragged tensor's ragged axis") if ragged else _time_axis(parts, mel, more)
    time_axis = None if ragged else shape[axis]
    if ragged:
        mel_len, length_rule = None, "from the ragged tensor's row lengths (a ragged batch holds no padding)"
        if spec.mel_len is not None:
            _check_length(parts, spec.mel_len, value, structure, axis)
            mel_len, length_rule = spec.mel_len, "named by the batch spec (the row lengths are not read)"
    else:
        mel_len, length_rule = _choose_length(parts, mel, spec, structure, axis)
    frame_s, source = (spec.frame_s, "given") if spec.frame_s else default_frame(len(shape))
    return BatchLayout(structure=structure, mel=mel, mel_len=mel_len, mel_rule=mel_rule, length_rule=length_rule,
                       ragged=ragged, time_axis=time_axis, frame_s=frame_s, frame_source=source, axis=axis,
                       axis_rule=axis_rule)


def _time_axis(parts: dict, mel: str, more: tuple) -> tuple[int, str]:
    """(the audio's time axis, the rule that chose it): see the module docstring."""
    shape = _shape(parts[mel])
    axes = range(1, len(shape))
    others = [dict(leaves(batch)).get(mel) for batch in more]
    shapes = [_shape(other) for other in others if other is not None and not _is_ragged(other)]
    varying = [a for a in axes if any(s is not None and len(s) == len(shape) and s[a] != shape[a] for s in shapes)]
    if len(varying) == 1:
        return varying[0], f"the only axis whose size differs between {1 + len(shapes)} batches"
    fitting = {a for a in axes for path, other in parts.items() if path != mel and _length_fits(other, shape[0], shape[a])
               and np.asarray(other).size and int(np.asarray(other).max()) == shape[a]}
    if len(fitting) == 1:
        axis = fitting.pop()
        return axis, f"the only axis whose size ({shape[axis]}) equals a length tensor's largest value"
    fits = {path: [a for a in axes if _length_fits(other, shape[0], shape[a])] for path, other in parts.items()
            if path != mel and any(_length_fits(other, shape[0], shape[a]) for a in axes)}
    if fits:
        longest = max(fits, key=lambda path: int(np.asarray(parts[path]).sum()))
        if len(fits[longest]) == 1:
            return fits[longest][0], (f"the only axis that holds the values of the largest length tensor "
                                      f"({_shown(longest)})")
    return 1, "assumed: axis 1, [batch, time, ...] (no axis varies between the batches read, no length tensor says)"


def _audio_like(value: Any) -> bool:
    shape = _shape(value)
    return _kind(value) == "float" and not _is_sparse(value) and shape is not None and len(shape) >= 2


def _size(value: Any) -> int:
    if _is_ragged(value):
        return int(np.prod(_shape(value.flat_values) or (0,)))
    return int(np.prod([d or 0 for d in _shape(value)]))


def _choose_mel(parts: dict, spec: BatchSpec, structure: str) -> tuple[str | None, str]:
    if spec.mel is not None:
        if spec.mel not in parts:
            raise BatchSpecError(f"mel={spec.mel}", "a component at that path", structure)
        if not _audio_like(parts[spec.mel]):
            raise BatchSpecError(f"mel={spec.mel}", "a floating-point tensor of rank >= 2 (batch, time, ...), "
                                 f"found {describe(parts[spec.mel])}", structure)
        return spec.mel, "named by the batch spec"
    candidates = [path for path, value in parts.items() if _audio_like(value)]
    if not candidates:
        return None, f"no floating-point tensor of rank >= 2 (batch, time, ...) in {structure}"
    best = max(candidates, key=lambda path: (_size(parts[path]), -candidates.index(path)))
    if len(candidates) == 1:
        return best, "the only floating-point tensor with a time axis"
    return best, f"the largest floating-point tensor with a time axis (of {len(candidates)})"


def _length_fits(value: Any, batch: int, time_axis: int) -> bool:
    shape = _shape(value)
    if _kind(value) != "int" or _is_ragged(value) or _is_sparse(value) or shape is None or shape != (batch,):
        return False
    values = np.asarray(value)
    return bool(values.size == 0 or (values.min() >= 0 and values.max() <= time_axis))


def _check_length(parts: dict, path: str, mel: Any, structure: str, axis: int = 1) -> None:
    shape = _shape(mel)
    if path not in parts:
        raise BatchSpecError(f"mel_len={path}", "a component at that path", structure)
    limit = shape[axis] if shape[axis] is not None else np.iinfo(np.int64).max
    if not _length_fits(parts[path], shape[0], limit):
        raise BatchSpecError(f"mel_len={path}", f"a rank-1 integer tensor of {shape[0]} values in [0, {shape[axis]}], "
                             f"found {describe(parts[path])}", structure)


def _choose_length(parts: dict, mel: str, spec: BatchSpec, structure: str, axis: int = 1
                   ) -> tuple[str | None, str]:
    value = parts[mel]
    batch, time_axis = _shape(value)[0], _shape(value)[axis]
    if spec.mel_len is not None:
        _check_length(parts, spec.mel_len, value, structure, axis)
        return spec.mel_len, "named by the batch spec"
    candidates = [path for path, other in parts.items() if path != mel and _length_fits(other, batch, time_axis)]
    if not candidates:
        return None, (f"from the content, trailing frames equal to the clip's last (no rank-1 integer tensor of "
                      f"{batch} values in [0, {time_axis}])")
    if len(candidates) == 1:
        return candidates[0], f"the only rank-1 integer tensor of {batch} values in [0, {time_axis}]"
    parent, _, name = mel.rpartition("/")
    named = [f"{parent}/{name}{suffix}" if parent else f"{name}{suffix}" for suffix in LENGTH_SUFFIXES]
    for path in named:
        if path in candidates:
            return path, f"named after the audio, of {len(candidates)} rank-1 integer tensors that fit"
    at_axis = [path for path in candidates if np.asarray(parts[path]).max(initial=0) == time_axis]
    if len(at_axis) == 1:
        return at_axis[0], (f"its largest value equals the time axis ({time_axis}), of {len(candidates)} rank-1 "
                            "integer tensors that fit")
    pool = at_axis or candidates
    best = max(pool, key=lambda path: (int(np.asarray(parts[path]).sum()), -pool.index(path)))
    return best, f"the largest total of {len(pool)} rank-1 integer tensors that fit (frames outnumber tokens)"
