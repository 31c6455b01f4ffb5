"""Synthetic LJSpeech-layout corpora, the precomputed `.npy` cache, and reading a real dataset.

Layout (as LJSpeech-1.1): ``<dir>/metadata.csv`` with ``id|text|normalized_text`` lines (pipe
delimited, no header) and ``<dir>/wavs/<id>.wav`` (16-bit PCM mono). The cache built from a
dataset holds ``mels/<id>.npy`` (float32 ``[frames, n_mels]``, C order) and ``tokens/<id>.npy``
(int32, 1-D) in a directory keyed by the mel parameters.

Synthetic corpora are deterministic for their ``CorpusSpec`` and built once into a directory
keyed by it, so every test, benchmark and xdist worker shares one copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy.signal import lfilter

from perfsuite.data import text as text_codec
from perfsuite.data.audio import MelConfig, log_mel_numpy
from perfsuite.data.wav import read_wav, write_wav
from perfsuite.errors import DataError
from perfsuite.files import atomic_target

# Bump when the generator changes, so corpora built by an older one are not reused.
GENERATOR_VERSION = 2
COMPLETE_MARKER = "COMPLETE"
CHARS_PER_SECOND = 14.0  # LJSpeech reads at roughly 14-15 characters a second


@dataclass(frozen=True)
class CorpusSpec:
    num_utterances: int
    sample_rate: int = 22050
    min_seconds: float = 1.0
    max_seconds: float = 6.0
    distribution: str = "uniform"  # or "lognormal": median at the range's geometric centre
    seed: int = 0

    def __post_init__(self):
        if self.num_utterances < 1:
            raise ValueError(f"num_utterances: expected ≥ 1, found {self.num_utterances}")
        if not 0.2 <= self.min_seconds <= self.max_seconds:
            raise ValueError(
                f"min_seconds/max_seconds: expected 0.2 ≤ min ≤ max, found {self.min_seconds}/{self.max_seconds}"
            )
        if self.distribution not in ("uniform", "lognormal"):
            raise ValueError(f"distribution: expected 'uniform' or 'lognormal', found {self.distribution!r}")

    def key(self) -> str:
        payload = json.dumps({"generator": GENERATOR_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


PRESETS = {
    "tiny": CorpusSpec(num_utterances=24, min_seconds=0.3, max_seconds=1.5, seed=1),
    "small": CorpusSpec(num_utterances=128, seed=2),
    "default": CorpusSpec(num_utterances=512, seed=3),
}


@dataclass(frozen=True)
class Utterance:
    id: str
    text: str
    normalized_text: str


def default_data_root() -> Path:
    return Path(os.environ.get("PERFSUITE_DATA_DIR", Path.home() / ".cache" / "perfsuite"))


def build_corpus(spec: CorpusSpec, *, root: Path | None = None) -> Path:
    """The dataset directory for ``spec``, generated on first use and reused afterwards."""
    root = Path(root) if root is not None else default_data_root()
    final = root / f"ljspeech-synth-{spec.key()}"
    if (final / COMPLETE_MARKER).exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=f".building-{spec.key()}-"))
    try:
        _write_corpus(spec, staging)
        (staging / COMPLETE_MARKER).write_text(json.dumps(asdict(spec)))
        _publish(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _publish(staging: Path, final: Path) -> None:
    """Rename the finished build into place; a concurrent builder that got there first wins."""
    try:
        os.rename(staging, final)
    except OSError:
        if not (final / COMPLETE_MARKER).exists():
            raise


def _write_corpus(spec: CorpusSpec, directory: Path) -> None:
    rng = np.random.default_rng(spec.seed)
    (directory / "wavs").mkdir()
    lines = []
    for index, seconds in enumerate(_durations(spec, rng)):
        utt_id = f"LJ{index // 100 + 1:03d}-{index % 100 + 1:04d}"
        audio, voiced_seconds = synthesize_utterance(rng, seconds=seconds, sample_rate=spec.sample_rate)
        write_wav(directory / "wavs" / f"{utt_id}.wav", audio, sample_rate=spec.sample_rate)
        text, normalized = synthesize_text(rng, voiced_seconds=voiced_seconds)
        lines.append(f"{utt_id}|{text}|{normalized}\n")
    (directory / "metadata.csv").write_text("".join(lines), encoding="utf-8")


def _durations(spec: CorpusSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.distribution == "uniform":
        return rng.uniform(spec.min_seconds, spec.max_seconds, spec.num_utterances)
    centre = np.log(np.sqrt(spec.min_seconds * spec.max_seconds))
    spread = np.log(spec.max_seconds / spec.min_seconds) / 4
    return np.clip(rng.lognormal(centre, spread, spec.num_utterances), spec.min_seconds, spec.max_seconds)


def synthesize_utterance(rng: np.random.Generator, *, seconds: float, sample_rate: int):
    """Speech-like int16 audio of exactly ``round(seconds * sample_rate)`` samples, and its voiced duration.

    A harmonic source with a gliding f0, shaped by three formant resonators, with aspiration
    noise and a syllable-rate envelope, between stretches of near-silence (a low noise floor, as
    in real recordings, rather than digital zeros). Leading and trailing silences are 0.05-0.25 s
    each, shortened in proportion for clips under 1.5 s so that speech stays at least 2/3 of
    every clip (short clips would otherwise be mostly silence, and their text length would no
    longer follow their duration).
    """
    total = round(seconds * sample_rate)
    lead, trail = (rng.uniform(0.05, 0.25, 2) * min(1.0, seconds / 1.5) * sample_rate).astype(int)
    n = total - lead - trail
    t = np.arange(n) / sample_rate
    f0 = np.linspace(rng.uniform(90, 150), rng.uniform(150, 240), n) + 12 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    top = min(5000.0, 0.45 * sample_rate)  # harmonics up to 5 kHz, none above Nyquist (no aliasing)
    source = sum(np.sin(k * phase) / k for k in range(1, 1 + int(top // f0.max())))
    source = source + 0.05 * rng.standard_normal(n)
    voiced = np.zeros(n)
    for centre, bandwidth in zip(rng.uniform([500, 1000, 2300], [900, 1800, 3000]), (90, 110, 160)):
        voiced += _resonate(source, centre=centre, bandwidth=bandwidth, sample_rate=sample_rate)
    syllables = 0.55 + 0.45 * np.sin(2 * np.pi * rng.uniform(3, 5) * t + rng.uniform(0, 2 * np.pi))
    voiced *= syllables * np.sin(np.pi * np.arange(n) / n) ** 0.3  # fade in and out
    voiced *= rng.uniform(0.3, 0.8) / np.abs(voiced).max()
    floor = 3e-4 * rng.standard_normal(lead + trail)
    audio = np.concatenate([floor[:lead], voiced, floor[lead:]])
    return np.round(np.clip(audio, -1, 1) * 32767).astype(np.int16), n / sample_rate


def _resonate(signal: np.ndarray, *, centre: float, bandwidth: float, sample_rate: int) -> np.ndarray:
    radius = np.exp(-np.pi * bandwidth / sample_rate)
    theta = 2 * np.pi * centre / sample_rate
    return lfilter([1 - radius], [1, -2 * radius * np.cos(theta), radius**2], signal)


_ONSETS = ["b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "th", "sh", "ch", "st"]
_VOWELS = ["a", "e", "i", "o", "u", "ea", "ou", "ai"]
_CODAS = ["", "", "n", "r", "s", "t", "d", "ng", "ll"]
_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                 "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def synthesize_text(rng: np.random.Generator, *, voiced_seconds: float) -> tuple[str, str]:
    """A sentence whose length follows the voiced duration, and its normalized form.

    As in LJSpeech, ``text`` may hold digits that ``normalized_text`` spells out.
    """
    target = max(4, int(voiced_seconds * CHARS_PER_SECOND * rng.uniform(0.85, 1.15)))
    written, spoken = [], []
    length = -1  # characters of " ".join(spoken) so far
    while length < target:
        if rng.random() < 0.06 and target - length > 12:  # a number is spelled out in up to 13 characters
            number = int(rng.integers(1, 100))
            word_written, word_spoken = str(number), _number_to_words(number)
        else:
            # Fewer syllables as the target nears (a syllable is ~3.5 characters), so that short
            # sentences land close to their target and text length follows duration.
            syllables = min(int(rng.integers(1, 4)), max(1, round((target - length - 1) / 3.5)))
            word_spoken = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                                  for _ in range(syllables))
            if rng.random() < 0.08:
                word_spoken += ","
            word_written = word_spoken
        written.append(word_written)
        spoken.append(word_spoken)
        length += len(word_spoken) + 1
    sentence = " ".join(written)
    normalized = " ".join(spoken)
    return sentence[0].upper() + sentence[1:] + ".", normalized[0].upper() + normalized[1:] + "."


def _number_to_words(number: int) -> str:
    if number < 20:
        return _NUMBER_WORDS[number]
    tens, ones = divmod(number, 10)
    return _TENS[tens] + ("" if ones == 0 else "-" + _NUMBER_WORDS[ones])


def read_metadata(dataset_dir: Path) -> list[Utterance]:
    """The utterances listed in ``metadata.csv``.

    Each non-blank line is ``id|text|normalized_text`` (or ``id|text``, when the text needs no
    normalising). A line with another field count, an empty id, an id that is not a plain file
    name, an id listed twice, or bytes that are not UTF-8 is a DataError naming ``file:line``.
    """
    path = Path(dataset_dir) / "metadata.csv"
    expected = "an LJSpeech metadata.csv (id|text|normalized_text lines)"
    if not path.is_file():
        raise DataError(path, expected=expected, found="no such file" if not path.exists() else "not a file")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise DataError(path, expected=expected, found=f"{type(error).__name__}: {error.strerror}") from None
    utterances, line_of_id = [], {}
    for number, raw_line in enumerate(raw.splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(where, expected="UTF-8 text", found=f"byte {raw_line[error.start]:#04x} at column "
                            f"{error.start + 1}") from None
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) not in (2, 3) or not fields[0]:
            raise DataError(where, expected="'id|text|normalized_text'",
                            found=f"{len(fields)} field(s): {line[:80]!r}")
        utt_id = fields[0]
        if utt_id in (".", "..") or any(sep in utt_id for sep in "/\\\0"):
            raise DataError(where, expected="an id usable as a file name (no '/', '\\', NUL, '.' or '..')",
                            found=repr(utt_id))
        if utt_id in line_of_id:
            raise DataError(where, expected="each id listed once", found=f"{utt_id!r} again (first on line "
                            f"{line_of_id[utt_id]})")
        line_of_id[utt_id] = number
        normalized = fields[2] if len(fields) == 3 and fields[2] else fields[1]
        utterances.append(Utterance(id=utt_id, text=fields[1], normalized_text=normalized))
    return utterances


def wav_path(dataset_dir: Path, utt_id: str) -> Path:
    return Path(dataset_dir) / "wavs" / f"{utt_id}.wav"


def cache_paths(cache_dir: Path, utt_id: str) -> tuple[Path, Path]:
    """The (mel, tokens) `.npy` paths of one utterance in a cache directory."""
    return Path(cache_dir) / "mels" / f"{utt_id}.npy", Path(cache_dir) / "tokens" / f"{utt_id}.npy"


def default_cache_dir(dataset_dir: Path, mel_config: MelConfig) -> Path:
    return Path(dataset_dir) / "cache" / f"mel-{mel_config.key()}"


def build_cache(dataset_dir: Path, *, mel_config: MelConfig = MelConfig(), cache_dir: Path | None = None) -> Path:
    """Precompute log-mels (reference numpy implementation) and tokens for every utterance.

    Reused when complete. Each file is written atomically, so an interrupted build leaves no
    half-written array behind; a WAV that cannot be read stops the build with its DataError.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(dataset_dir, mel_config)
    if (cache_dir / COMPLETE_MARKER).exists():
        return cache_dir
    (cache_dir / "mels").mkdir(parents=True, exist_ok=True)
    (cache_dir / "tokens").mkdir(parents=True, exist_ok=True)
    for utt in read_metadata(dataset_dir):
        mel_path, tokens_path = cache_paths(cache_dir, utt.id)
        if not mel_path.exists():
            audio = read_wav(wav_path(dataset_dir, utt.id), sample_rate=mel_config.sample_rate)
            save_npy_atomic(mel_path, log_mel_numpy(audio, mel_config))
        if not tokens_path.exists():
            save_npy_atomic(tokens_path, text_codec.encode(utt.normalized_text))
    (cache_dir / COMPLETE_MARKER).write_text(json.dumps(asdict(mel_config)))
    return cache_dir


def save_npy_atomic(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` atomically (files.atomic_target).

    np.save is given an open file, not a name, because given a name it appends ".npy" and the
    rename would move the wrong file. The array is made C-contiguous: np.save writes a
    Fortran-ordered header for a transposed view, which readers that assume C order scramble.
    """
    with atomic_target(path) as handle:
        # np.asarray(order="C"), not np.ascontiguousarray: that one turns a 0-d array into shape (1,).
        np.save(handle, np.asarray(array, order="C"), allow_pickle=False)
