"""Dataset builders: loader kind × source, with batching, shapes, prefetch and an errors policy.

Every loader yields the same batches: a dict with ``id`` (string[B]), ``tokens`` (int32[B, T]),
``mel`` (float32[B, F, n_mels]), ``text_len`` and ``mel_len`` (int32[B], the true lengths of
what the batch holds; padding is zeros and never counted).

Kinds:
- ``tf_native``: graph ops only (tf.io.read_file, tf.io.decode_raw or the header parsers, the TF mel).
- ``numpy_function``: the same math in Python/numpy inside ``tf.numpy_function`` (`.npy` files by np.load,
  read again on CPython 3.11's spurious AST error: ``npy.np_load``).
- ``librosa``: soundfile + librosa inside ``tf.numpy_function``, as TF TTS projects ship it
  (extra ``peers``). A speed peer only: its mel differs from ours.

Before the dataset is built, every file's header is checked in Python (cheap: headers only). A
file the loader cannot read raises a DataError naming it, or with ``on_error="skip"`` is left out
and listed in ``Loader.skipped``. The same checks are what ``perfsuite check-data`` reports.

How the TF-native loaders decode (``decode``):
- ``"preflight"`` (default): the headers preflight read are kept (perfsuite.data.layout); every read
  verifies the file's header bytes and size against them in the graph, then decodes the data with
  ``tf.io.decode_raw``. The samples equal tf.audio.decode_wav's / np.load's exactly.
- ``"in_graph"``: every read parses its header in the graph, with ``tf.audio.decode_wav`` for WAV and
  ``perfsuite.data.npy.decode_npy`` for `.npy`: the recipe TF TTS projects ship, slower (measured by
  benchmarks/test_loaders.py::test_loader_ratio[preflight_over_in_graph_decode_*]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfsuite._tensorflow import tensorflow
from perfsuite.data import text as text_codec
from perfsuite.data.audio import MelConfig, log_mel_numpy, log_mel_tf
from perfsuite.data.corpus import cache_paths, default_cache_dir, read_metadata, wav_path
from perfsuite.data.layout import FileLayout, decode_with_layouts, layout_columns, read_layout
from perfsuite.data.npy import check_npy, decode_npy, np_load
from perfsuite.data.wav import check_tf_readable, read_wav
from perfsuite.errors import DataError

tf = tensorflow()


AUTOTUNE = -1
KINDS = ("tf_native", "numpy_function", "librosa")
SOURCES = ("wav", "cache")
DECODES = ("preflight", "in_graph")
# extra work composed into the map function: (mel, element) -> mel (see build_loader)
MapExtra = Callable[[object, dict], object]


@dataclass(frozen=True)
class LoaderConfig:
    kind: str = "tf_native"
    source: str = "wav"
    batch_size: int = 16
    num_parallel_calls: int = 2  # AUTOTUNE (-1) lets tf.data choose
    deterministic: bool = True
    shuffle_seed: int | None = None  # None: file order
    static_shapes: bool = False  # pad every batch to (max_text_len, max_mel_frames)
    max_text_len: int | None = None
    max_mel_frames: int | None = None
    overlong: str = "truncate"  # or "reject": a sample over the static limits is an error / a skip
    drop_remainder: bool = False
    prefetch: int = AUTOTUNE  # 0: no prefetch
    prefetch_to_device: str | None = None  # e.g. "/gpu:0"; applied as the last transformation
    bucket_boundaries: tuple[int, ...] = ()  # mel-frame boundaries for length bucketing
    on_error: str = "raise"  # or "skip": unreadable files are left out and counted
    decode: str = "preflight"  # tf_native only: headers read at preflight and verified, or parsed in the graph

    def __post_init__(self):
        _require(self.kind in KINDS, "kind", f"one of {KINDS}", self.kind)
        _require(self.source in SOURCES, "source", f"one of {SOURCES}", self.source)
        _require(self.kind != "librosa" or self.source == "wav", "source", "'wav' for the librosa peer", self.source)
        _require(self.batch_size >= 1, "batch_size", "≥ 1", self.batch_size)
        _require(self.num_parallel_calls == AUTOTUNE or self.num_parallel_calls >= 1,
                 "num_parallel_calls", "≥ 1 or AUTOTUNE (-1)", self.num_parallel_calls)
        _require(self.overlong in ("truncate", "reject"), "overlong", "'truncate' or 'reject'", self.overlong)
        _require(self.on_error in ("raise", "skip"), "on_error", "'raise' or 'skip'", self.on_error)
        _require(self.prefetch == AUTOTUNE or self.prefetch >= 0, "prefetch", "≥ 0 or AUTOTUNE (-1)", self.prefetch)
        _require(self.decode in DECODES, "decode", f"one of {DECODES}", self.decode)
        _require(self.kind == "tf_native" or self.decode == "preflight", "decode",
                 "'preflight' for Python loaders (they parse headers in Python anyway)", self.decode)
        for name in ("max_text_len", "max_mel_frames"):
            value = getattr(self, name)
            _require(value is None or value >= 1, name, "≥ 1 or None", value)
        boundaries = self.bucket_boundaries
        _require(all(b >= 1 for b in boundaries) and list(boundaries) == sorted(set(boundaries)),
                 "bucket_boundaries", "strictly increasing mel-frame counts ≥ 1", boundaries)
        _require(self.static_shapes or (self.max_text_len is None and self.max_mel_frames is None),
                 "max_text_len/max_mel_frames", "None unless static_shapes=True (dynamic padding never truncates)",
                 (self.max_text_len, self.max_mel_frames))
        if self.static_shapes:
            _require(self.max_text_len is not None and self.max_mel_frames is not None,
                     "max_text_len/max_mel_frames", "both set when static_shapes=True",
                     (self.max_text_len, self.max_mel_frames))
            _require(not self.bucket_boundaries, "bucket_boundaries", "empty when static_shapes=True",
                     self.bucket_boundaries)

    @property
    def id(self) -> str:
        """Short stable id for parametrize: ``tf_native-wav-bs16-w2`` (``-in_graph`` for that decode)."""
        workers = "auto" if self.num_parallel_calls == AUTOTUNE else self.num_parallel_calls
        decode = "" if self.decode == "preflight" else f"-{self.decode}"
        return f"{self.kind}-{self.source}-bs{self.batch_size}-w{workers}{decode}"


def _require(ok: bool, name: str, expected: str, found) -> None:
    if not ok:
        raise ValueError(f"LoaderConfig.{name}: expected {expected}, found {found!r}")


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass(frozen=True)
class Loader:
    dataset: tf.data.Dataset
    config: LoaderConfig
    num_samples: int  # samples the dataset yields per epoch (before drop_remainder)
    skipped: tuple[SkippedFile, ...] = field(default=())

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)


@dataclass(frozen=True)
class _CheckedUtterance:
    id: str
    path: str  # the WAV, or the mel .npy for the cache source
    tokens_path: str  # cache source only
    tokens: np.ndarray  # wav source only (from metadata); empty for the cache source
    mel_frames: int
    layout: FileLayout | None  # of ``path``, as preflight read it (for decode="preflight" only)
    tokens_layout: FileLayout | None  # likewise, cache source only


def build_loader(*, dataset_dir: Path, config: LoaderConfig, cache_dir: Path | None = None,
                 mel_config: MelConfig = MelConfig(), map_extra: MapExtra | None = None) -> Loader:
    """The batched tf.data pipeline of ``config`` over an LJSpeech-layout directory.

    map_extra(mel, element) -> mel, when given, runs inside the map function after the loader's own
    work, in its parallel calls: the way the self-test plants a regression in the pipeline without a
    test seam in the config. It is traced as written (no autograph): graph ops, no Python control flow
    on tensors.
    """
    dataset_dir = Path(dataset_dir)
    if config.source == "cache":
        cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir(dataset_dir, mel_config)
        if not cache_dir.is_dir():  # one clear error rather than one per missing file
            raise DataError(cache_dir, expected="a cache directory (perfsuite.data.corpus.build_cache) for "
                            f"{mel_config}", found="not a directory" if cache_dir.exists() else "no such directory")
    records, skipped = preflight(dataset_dir=dataset_dir, config=config, cache_dir=cache_dir, mel_config=mel_config)
    if not records:
        raise DataError(dataset_dir, expected="at least one readable utterance",
                        found=f"none ({len(skipped)} skipped)")
    dataset = _element_dataset(records, config, mel_config, map_extra)
    dataset = _batch(dataset, config, mel_config)
    if config.prefetch == 0:  # tf.data would otherwise inject its own prefetch and "off" would not be off
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        dataset = dataset.with_options(options)
    else:
        dataset = dataset.prefetch(config.prefetch)
    if config.prefetch_to_device:
        dataset = dataset.apply(tf.data.experimental.prefetch_to_device(config.prefetch_to_device))
    return Loader(dataset=dataset, config=config, num_samples=len(records), skipped=tuple(skipped))


def preflight(*, dataset_dir: Path, config: LoaderConfig, cache_dir: Path | None,
              mel_config: MelConfig) -> tuple[list[_CheckedUtterance], list[SkippedFile]]:
    """Check every file's header; return the readable records and the skipped files.

    With ``on_error="raise"`` the first bad file raises its DataError instead.
    """
    records, skipped = [], []
    for utt in read_metadata(dataset_dir):
        try:
            record = _check_utterance(utt, dataset_dir, config, cache_dir, mel_config)
        except DataError as error:
            if config.on_error == "raise":
                raise
            skipped.append(SkippedFile(path=str(error.path), reason=f"expected {error.expected}, found {error.found}"))
            continue
        records.append(record)
    return records, skipped


@dataclass(frozen=True)
class DataReport:
    checked: int  # utterances checked, per source
    problems: tuple[SkippedFile, ...]
    sources: tuple[str, ...]

    def summary(self) -> str:
        return (f"checked {self.checked} utterance(s) from {' and '.join(self.sources)}: "
                f"{len(self.problems)} unreadable file(s)")


def check_dataset(dataset_dir: Path, *, cache_dir: Path | None = None,
                  mel_config: MelConfig = MelConfig()) -> DataReport:
    """Every file the TF-native loaders cannot read, from the WAVs and (when present) the cache."""
    dataset_dir = Path(dataset_dir)
    if cache_dir is None and default_cache_dir(dataset_dir, mel_config).is_dir():
        cache_dir = default_cache_dir(dataset_dir, mel_config)
    sources = ("wav",) if cache_dir is None else ("wav", "cache")
    problems, checked = [], 0
    for source in sources:
        config = LoaderConfig(kind="tf_native", source=source, on_error="skip")
        records, skipped = preflight(dataset_dir=dataset_dir, config=config, cache_dir=cache_dir,
                                     mel_config=mel_config)
        problems.extend(skipped)
        checked = len(records) + len(skipped)
    return DataReport(checked=checked, problems=tuple(problems), sources=sources)


def _check_utterance(utt, dataset_dir, config, cache_dir, mel_config) -> _CheckedUtterance:
    keep_layouts = config.kind == "tf_native" and config.decode == "preflight"  # else nobody reads them
    if config.source == "wav":
        path = wav_path(dataset_dir, utt.id)
        info = check_tf_readable(path, sample_rate=mel_config.sample_rate, channels=1)
        tokens = text_codec.encode(utt.normalized_text)
        layout = read_layout(path, data_offset=info.data_offset,
                             data_bytes=info.num_frames * info.block_align) if keep_layouts else None
        record = _CheckedUtterance(utt.id, str(path), "", tokens, mel_config.num_frames(info.num_frames), layout, None)
        text_len = len(tokens)
    else:
        mel_path, tokens_path = cache_paths(cache_dir, utt.id)
        mel_header = check_npy(mel_path, dtype=np.dtype(np.float32), ndim=2)
        tokens_header = check_npy(tokens_path, dtype=np.dtype(np.int32), ndim=1)
        if mel_header.shape[1] != mel_config.n_mels:
            raise DataError(mel_path, expected=f"{mel_config.n_mels} mel channels", found=f"shape {mel_header.shape}")
        layouts = (_npy_layout(mel_header), _npy_layout(tokens_header)) if keep_layouts else (None, None)
        record = _CheckedUtterance(utt.id, str(mel_path), str(tokens_path), np.zeros(0, np.int32), mel_header.shape[0],
                         *layouts)
        text_len = tokens_header.shape[0]
    if config.static_shapes and config.overlong == "reject":
        _reject_overlong(record.path, text_len, record.mel_frames, config)
    return record


def _npy_layout(header) -> FileLayout:
    return read_layout(header.path, data_offset=header.data_offset, data_bytes=header.data_bytes,
                       big_endian=header.descr.startswith(">"))


def _reject_overlong(path: str, text_len: int, mel_frames: int, config: LoaderConfig) -> None:
    if text_len > config.max_text_len or mel_frames > config.max_mel_frames:
        raise DataError(path, expected=f"≤ {config.max_text_len} tokens and ≤ {config.max_mel_frames} mel frames",
                        found=f"{text_len} tokens and {mel_frames} mel frames")


def _element_dataset(records: list[_CheckedUtterance], config: LoaderConfig, mel_config: MelConfig,
                     map_extra: MapExtra | None) -> tf.data.Dataset:
    columns = {"id": [r.id for r in records], "path": [r.path for r in records]}
    if config.source == "wav":
        columns["tokens"] = tf.ragged.constant([r.tokens for r in records], dtype=tf.int32, ragged_rank=1)
    else:
        columns["tokens_path"] = [r.tokens_path for r in records]
    if config.kind == "tf_native" and config.decode == "preflight":
        columns.update(layout_columns([r.layout for r in records], "file"))
        if config.source == "cache":
            columns.update(layout_columns([r.tokens_layout for r in records], "tokens_file"))
    dataset = tf.data.Dataset.from_tensor_slices(columns)
    if config.shuffle_seed is not None:
        dataset = dataset.shuffle(len(records), seed=config.shuffle_seed, reshuffle_each_iteration=True)
    load = _LOAD_FUNCTIONS[(config.kind, config.source, config.decode)]

    def load_element(element):
        mel, tokens = load(element, mel_config)
        mel = tf.ensure_shape(mel, [None, mel_config.n_mels])
        tokens = tf.ensure_shape(tokens, [None])
        if map_extra is not None:
            mel = map_extra(mel, element)
        if config.static_shapes:
            mel, tokens = mel[: config.max_mel_frames], tokens[: config.max_text_len]
        return {"id": element["id"], "tokens": tokens, "mel": mel,
                "text_len": tf.shape(tokens, out_type=tf.int32)[0], "mel_len": tf.shape(mel, out_type=tf.int32)[0]}

    # Plain graph ops throughout, so traced as written: autograph would convert every function the trace
    # calls, library code included (librosa's filter bank took seconds of every fresh process).
    return dataset.map(tf.autograph.experimental.do_not_convert(load_element),
                       num_parallel_calls=config.num_parallel_calls, deterministic=config.deterministic)


def _tf_native_wav(element, mel_config):
    """16-bit mono PCM at the corpus rate (preflight checked it), scaled as decode_wav scales: x / 32768."""
    [pcm] = decode_with_layouts([(tf.io.read_file(element["path"]), "file", tf.int16, element["path"])],
                                element, what="WAV")
    return log_mel_tf(tf.cast(pcm, tf.float32) * (1.0 / 32768.0), mel_config), element["tokens"]


def _tf_native_wav_in_graph(element, mel_config):
    audio, sample_rate = tf.audio.decode_wav(tf.io.read_file(element["path"]), desired_channels=1)
    rate_ok = tf.debugging.Assert(  # a backstop: preflight already checked every header
        tf.equal(sample_rate, mel_config.sample_rate),
        [element["path"], f"expected sample rate {mel_config.sample_rate}, found", sample_rate])
    with tf.control_dependencies([rate_ok]):
        return log_mel_tf(audio[:, 0], mel_config), element["tokens"]


def _tf_native_cache(element, mel_config):
    mel, tokens = decode_with_layouts([
        (tf.io.read_file(element["path"]), "file", tf.float32, element["path"]),
        (tf.io.read_file(element["tokens_path"]), "tokens_file", tf.int32, element["tokens_path"]),
    ], element, what=".npy")
    return tf.reshape(mel, [-1, mel_config.n_mels]), tokens


def _tf_native_cache_in_graph(element, mel_config):
    mel = decode_npy(tf.io.read_file(element["path"]), dtype=tf.float32, path=element["path"])
    tokens = decode_npy(tf.io.read_file(element["tokens_path"]), dtype=tf.int32, path=element["tokens_path"])
    return mel, tokens


def _numpy_function_wav(element, mel_config):
    def load(path):
        return log_mel_numpy(read_wav(path.decode(), sample_rate=mel_config.sample_rate), mel_config)

    return tf.numpy_function(load, [element["path"]], tf.float32, stateful=False), element["tokens"]


def _numpy_function_cache(element, mel_config):
    def load(mel_path, tokens_path):
        # npy.np_load: np.load, read again when CPython 3.11's AST constructor fails it on tf.data's threads.
        # To native byte order: tf.numpy_function copies a big-endian ('>f4') array's raw bytes inside
        # tf.data and returns scrambled values. astype(copy=False) costs nothing for native arrays.
        return (np_load(mel_path.decode()).astype(np.float32, copy=False),
                np_load(tokens_path.decode()).astype(np.int32, copy=False))

    mel, tokens = tf.numpy_function(load, [element["path"], element["tokens_path"]],
                                    [tf.float32, tf.int32], stateful=False)
    return mel, tokens


def _librosa_wav(element, mel_config):
    import librosa  # the peers extra; imported here so perfsuite works without it
    import soundfile

    basis = librosa.filters.mel(sr=mel_config.sample_rate, n_fft=mel_config.n_fft, n_mels=mel_config.n_mels,
                                fmin=mel_config.fmin, fmax=mel_config.fmax)

    def load(path):
        audio, _ = soundfile.read(path.decode(), dtype="float32")
        spectrum = np.abs(librosa.stft(audio, n_fft=mel_config.n_fft, hop_length=mel_config.hop_length,
                                       win_length=mel_config.win_length))
        return np.log(np.maximum(basis @ spectrum, mel_config.log_floor)).T.astype(np.float32)

    return tf.numpy_function(load, [element["path"]], tf.float32, stateful=False), element["tokens"]


_LOAD_FUNCTIONS = {
    ("tf_native", "wav", "preflight"): _tf_native_wav,
    ("tf_native", "wav", "in_graph"): _tf_native_wav_in_graph,
    ("tf_native", "cache", "preflight"): _tf_native_cache,
    ("tf_native", "cache", "in_graph"): _tf_native_cache_in_graph,
    ("numpy_function", "wav", "preflight"): _numpy_function_wav,
    ("numpy_function", "cache", "preflight"): _numpy_function_cache,
    ("librosa", "wav", "preflight"): _librosa_wav,
}


def _batch(dataset: tf.data.Dataset, config: LoaderConfig, mel_config: MelConfig) -> tf.data.Dataset:
    if config.bucket_boundaries:
        return dataset.bucket_by_sequence_length(
            lambda element: element["mel_len"],
            bucket_boundaries=list(config.bucket_boundaries),
            bucket_batch_sizes=[config.batch_size] * (len(config.bucket_boundaries) + 1),
            drop_remainder=config.drop_remainder,
        )
    if config.static_shapes:
        shapes = {"id": [], "tokens": [config.max_text_len], "mel": [config.max_mel_frames, mel_config.n_mels],
                  "text_len": [], "mel_len": []}
        return dataset.padded_batch(config.batch_size, padded_shapes=shapes, drop_remainder=config.drop_remainder)
    return dataset.padded_batch(config.batch_size, drop_remainder=config.drop_remainder)
