"""The synthetic LJSpeech-layout corpus, its precomputed cache, atomic .npy writes and metadata parsing."""

import os
import threading
import wave
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from perfsuite.data import corpus, text
from perfsuite.data.audio import MelConfig, log_mel_numpy
from perfsuite.data.corpus import (
    PRESETS,
    CorpusSpec,
    build_cache,
    build_corpus,
    cache_paths,
    read_metadata,
    save_npy_atomic,
    synthesize_utterance,
    wav_path,
)
from perfsuite.data.npy import inspect_npy
from perfsuite.data.wav import inspect_wav, read_wav
from perfsuite.errors import DataError

SMALL = CorpusSpec(num_utterances=3, min_seconds=0.3, max_seconds=0.6, seed=7)


def _tree_bytes(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _read_with_wave_module(path: Path):
    """Python's own WAV reader, independent of perfsuite's parser."""
    with wave.open(str(path), "rb") as w:
        frames = w.readframes(w.getnframes())
        return w.getnchannels(), w.getsampwidth(), w.getframerate(), np.frombuffer(frames, "<i2")


# --- determinism and reuse ---------------------------------------------------------------------------


def test_same_spec_gives_the_same_bytes(tmp_path):
    first = build_corpus(SMALL, root=tmp_path / "a")
    second = build_corpus(SMALL, root=tmp_path / "b")
    assert first.name == second.name
    files = _tree_bytes(first)
    assert files == _tree_bytes(second)
    assert {"metadata.csv", "wavs/LJ001-0001.wav", "wavs/LJ001-0003.wav"} <= set(files)


def test_another_seed_gives_other_audio_and_texts(tmp_path):
    first = build_corpus(SMALL, root=tmp_path)
    other = build_corpus(CorpusSpec(**{**SMALL.__dict__, "seed": 8}), root=tmp_path)
    assert other != first
    a, b = _tree_bytes(first), _tree_bytes(other)
    assert a.keys() == b.keys()
    assert all(a[name] != b[name] for name in a if name != "COMPLETE")


def test_key_changes_with_every_parameter():
    keys = {SMALL.key()}
    for change in ({"num_utterances": 4}, {"sample_rate": 16000}, {"min_seconds": 0.4}, {"max_seconds": 0.7},
                   {"distribution": "lognormal"}, {"seed": 8}):
        keys.add(CorpusSpec(**{**SMALL.__dict__, **change}).key())
    assert len(keys) == 7


def test_second_build_reuses_the_corpus(tmp_path, monkeypatch):
    directory = build_corpus(SMALL, root=tmp_path)
    mtimes = {p: p.stat().st_mtime_ns for p in directory.rglob("*")}

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the corpus was rebuilt")

    monkeypatch.setattr(corpus, "_write_corpus", no_rebuild)
    assert build_corpus(SMALL, root=tmp_path) == directory
    assert {p: p.stat().st_mtime_ns for p in directory.rglob("*")} == mtimes


def test_concurrent_builders_publish_one_complete_copy(tmp_path):
    results, errors = [], []

    def build():
        try:
            results.append(build_corpus(SMALL, root=tmp_path))
        except Exception as error:  # noqa: BLE001 -- collected and asserted on below
            errors.append(error)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]  # no staging directory left over
    assert len(read_metadata(results[0])) == 3


def test_spec_rejects_bad_parameters():
    with pytest.raises(ValueError, match="num_utterances"):
        CorpusSpec(num_utterances=0)
    with pytest.raises(ValueError, match="min_seconds"):
        CorpusSpec(num_utterances=1, min_seconds=2.0, max_seconds=1.0)
    with pytest.raises(ValueError, match="distribution"):
        CorpusSpec(num_utterances=1, distribution="normal")


# --- layout and content ------------------------------------------------------------------------------


def test_ljspeech_layout(tiny_corpus):
    lines = (tiny_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == PRESETS["tiny"].num_utterances
    fields = [line.split("|") for line in lines]
    assert all(len(f) == 3 and all(f) for f in fields)  # id|text|normalized_text, no header line
    ids = [f[0] for f in fields]
    assert ids[0] == "LJ001-0001" and len(set(ids)) == len(ids)
    assert sorted(p.stem for p in (tiny_corpus / "wavs").iterdir()) == sorted(ids)
    for utt_id in ids:
        channels, width, rate, samples = _read_with_wave_module(tiny_corpus / "wavs" / f"{utt_id}.wav")
        assert (channels, width, rate) == (1, 2, 22050)
        info = inspect_wav(tiny_corpus / "wavs" / f"{utt_id}.wav")
        assert (info.format_tag, info.bits_per_sample, info.num_frames) == (1, 16, len(samples))


def test_text_and_normalized_text(tiny_corpus):
    for utt in read_metadata(tiny_corpus):
        assert utt.normalized_text.endswith(".") and utt.normalized_text[0].isupper()
        assert not any(ch.isdigit() for ch in utt.normalized_text)  # digits are spelled out
        assert text.UNKNOWN_ID not in text.encode(utt.normalized_text)


def test_sample_rate_is_configurable(tmp_path):
    spec = CorpusSpec(num_utterances=2, sample_rate=16000, min_seconds=0.3, max_seconds=0.5, seed=4)
    directory = build_corpus(spec, root=tmp_path)
    for utt in read_metadata(directory):
        channels, width, rate, samples = _read_with_wave_module(wav_path(directory, utt.id))
        assert (channels, width, rate) == (1, 2, 16000)
        assert 0.3 * 16000 - 0.5 <= len(samples) <= 0.5 * 16000 + 0.5
    mel_config = MelConfig(sample_rate=16000)
    cache = build_cache(directory, mel_config=mel_config)
    for utt in read_metadata(directory):
        audio = read_wav(wav_path(directory, utt.id), sample_rate=16000)
        np.testing.assert_array_equal(np.load(cache_paths(cache, utt.id)[0]), log_mel_numpy(audio, mel_config))


def test_durations_within_range(tiny_corpus):
    spec = PRESETS["tiny"]
    for utt in read_metadata(tiny_corpus):
        frames = inspect_wav(wav_path(tiny_corpus, utt.id)).num_frames
        # Durations are drawn in seconds and rounded to whole samples.
        assert spec.min_seconds * 22050 - 0.5 <= frames <= spec.max_seconds * 22050 + 0.5, utt.id


@pytest.mark.parametrize("distribution", ["uniform", "lognormal"])
def test_duration_distribution_stays_in_range(distribution):
    spec = CorpusSpec(num_utterances=2000, min_seconds=1.0, max_seconds=10.0, distribution=distribution)
    seconds = corpus._durations(spec, np.random.default_rng(0))
    assert seconds.min() >= 1.0 and seconds.max() <= 10.0
    assert seconds.max() - seconds.min() > 5.0  # spread over the range, not a constant
    if distribution == "lognormal":
        assert abs(np.median(seconds) - np.sqrt(10.0)) < 0.3  # median at the geometric centre


def test_token_lengths_follow_durations(tiny_corpus):
    utterances = read_metadata(tiny_corpus)
    seconds = [inspect_wav(wav_path(tiny_corpus, u.id)).duration_s for u in utterances]
    lengths = [len(text.encode(u.normalized_text)) for u in utterances]
    assert spearmanr(seconds, lengths).statistic > 0.8


def test_audio_is_speech_like_with_quiet_edges(tiny_corpus):
    for utt in read_metadata(tiny_corpus):
        audio = read_wav(wav_path(tiny_corpus, utt.id), sample_rate=22050)
        edge = int(0.005 * 22050)
        assert np.abs(audio).max() > 0.2, utt.id  # not silent
        assert np.sqrt(np.mean(audio**2)) > 0.02, utt.id
        # Leading and trailing near-silence: a low noise floor, not digital zeros.
        for part in (audio[:edge], audio[-edge:]):
            assert np.abs(part).max() < 0.01, utt.id
            assert np.count_nonzero(part) > 0, utt.id
    first, second = (read_wav(wav_path(tiny_corpus, u.id), sample_rate=22050) for u in read_metadata(tiny_corpus)[:2])
    assert not np.array_equal(first[: len(second)], second[: len(first)])


@settings(max_examples=max(1, settings.default.max_examples // 2))  # each synthesizes up to 3 s of audio
@given(seconds=st.floats(0.2, 3.0), sample_rate=st.sampled_from([8000, 16000, 22050]), seed=st.integers(0, 2**32))
def test_synthesized_utterance_has_the_exact_length_and_quiet_edges(seconds, sample_rate, seed):
    audio, voiced_seconds = synthesize_utterance(np.random.default_rng(seed), seconds=seconds,
                                                 sample_rate=sample_rate)
    assert audio.dtype == np.int16 and audio.shape == (round(seconds * sample_rate),)
    assert 2 / 3 * seconds - 1 / sample_rate <= voiced_seconds < seconds
    edge = int(0.005 * sample_rate)
    assert np.abs(audio[:edge]).max() < 328 and np.abs(audio[-edge:]).max() < 328  # below -40 dBFS
    assert np.abs(audio).max() > 0.2 * 32767


# --- cache -------------------------------------------------------------------------------------------


def test_cache_holds_one_mel_and_one_tokens_file_per_utterance(tiny_corpus, tiny_cache):
    ids = {u.id for u in read_metadata(tiny_corpus)}
    assert {p.name for p in (tiny_cache / "mels").iterdir()} == {f"{i}.npy" for i in ids}  # no temp files
    assert {p.name for p in (tiny_cache / "tokens").iterdir()} == {f"{i}.npy" for i in ids}
    assert tiny_cache.parent == tiny_corpus / "cache" and MelConfig().key() in tiny_cache.name


def test_cache_mel_is_the_numpy_log_mel_of_the_wav(tiny_corpus, tiny_cache):
    for utt in read_metadata(tiny_corpus):
        mel_path, tokens_path = cache_paths(tiny_cache, utt.id)
        audio = read_wav(wav_path(tiny_corpus, utt.id), sample_rate=22050)
        mel = np.load(mel_path)
        assert mel.dtype == np.float32 and mel.shape == (MelConfig().num_frames(len(audio)), 80)
        np.testing.assert_array_equal(mel, log_mel_numpy(audio, MelConfig()))
        tokens = np.load(tokens_path)
        assert tokens.dtype == np.int32 and tokens.ndim == 1
        np.testing.assert_array_equal(tokens, text.encode(utt.normalized_text))
        for header in (inspect_npy(mel_path), inspect_npy(tokens_path)):
            assert header.fortran_order is False


def test_cache_is_reused(tiny_corpus, tiny_cache):
    mtimes = {p: p.stat().st_mtime_ns for p in tiny_cache.rglob("*")}
    assert build_cache(tiny_corpus) == tiny_cache
    assert {p: p.stat().st_mtime_ns for p in tiny_cache.rglob("*")} == mtimes


def test_cache_build_stops_at_an_unreadable_wav(tmp_path):
    directory = tmp_path / "data"
    (directory / "wavs").mkdir(parents=True)
    (directory / "metadata.csv").write_text("a|Hi.|Hi.\n")
    (directory / "wavs" / "a.wav").write_bytes(b"not a wav at all")
    with pytest.raises(DataError, match="a.wav"):
        build_cache(directory)
    assert not (corpus.default_cache_dir(directory, MelConfig()) / corpus.COMPLETE_MARKER).exists()


# --- save_npy_atomic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mel.npy", "mel", "mel.npy.tmp"])
def test_save_npy_atomic_writes_exactly_the_path(tmp_path, name):
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_npy_atomic(tmp_path / name, array)
    assert [p.name for p in tmp_path.iterdir()] == [name]  # np.save's ".npy" suffix pitfall: no extra file
    np.testing.assert_array_equal(np.load(tmp_path / name), array)


def test_save_npy_atomic_writes_c_order(tmp_path):
    fortran = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    save_npy_atomic(tmp_path / "a.npy", fortran)
    assert inspect_npy(tmp_path / "a.npy").fortran_order is False
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), fortran)
    save_npy_atomic(tmp_path / "b.npy", fortran.T)  # a transposed view is Fortran-contiguous too
    assert inspect_npy(tmp_path / "b.npy").fortran_order is False
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), fortran.T)


def test_save_npy_atomic_keeps_the_shape_of_0d_arrays(tmp_path):
    save_npy_atomic(tmp_path / "a.npy", np.float32(2.5))
    loaded = np.load(tmp_path / "a.npy")
    assert loaded.shape == () and loaded == np.float32(2.5)


def test_save_npy_atomic_replaces_and_leaves_nothing_behind_on_failure(tmp_path):
    path = tmp_path / "a.npy"
    save_npy_atomic(path, np.zeros(3, np.int32))
    save_npy_atomic(path, np.ones(5, np.int32))
    np.testing.assert_array_equal(np.load(path), np.ones(5, np.int32))
    with pytest.raises(ValueError):
        save_npy_atomic(path, np.array([object()], dtype=object))  # cannot be saved without pickle
    assert os.listdir(tmp_path) == ["a.npy"]
    np.testing.assert_array_equal(np.load(path), np.ones(5, np.int32))  # the old file is intact


# --- read_metadata -----------------------------------------------------------------------------------


def _metadata(tmp_path, content) -> Path:
    (tmp_path / "metadata.csv").write_bytes(content if isinstance(content, bytes) else content.encode())
    return tmp_path


def test_read_metadata_fields_and_blank_lines(tmp_path):
    utterances = read_metadata(_metadata(tmp_path, "a|Text 1.|Text one.\n\nb|Plain.\nc|Plain two.|\r\n"))
    assert [(u.id, u.text, u.normalized_text) for u in utterances] == [
        ("a", "Text 1.", "Text one."), ("b", "Plain.", "Plain."), ("c", "Plain two.", "Plain two.")]


@pytest.mark.parametrize(("content", "line", "found"), [
    ("a|x|x\nb\n", 2, "1 field(s)"),
    ("a|x|x|extra\n", 1, "4 field(s)"),
    ("a|x|x\n|x|x\n", 2, "3 field(s)"),
    ("a|x|x\nb|y|y\na|z|z\n", 3, "'a' again (first on line 1)"),
    ("../etc|x|x\n", 1, "'../etc'"),
    (b"a|x|x\nb|caf\xe9|x\n", 2, "byte 0xe9"),
])
def test_read_metadata_errors_name_file_and_line(tmp_path, content, line, found):
    with pytest.raises(DataError) as error:
        read_metadata(_metadata(tmp_path, content))
    assert error.value.path == f"{tmp_path / 'metadata.csv'}:{line}"
    assert found in error.value.found
    assert str(error.value).startswith(f"{tmp_path / 'metadata.csv'}:{line}: expected ")


def test_read_metadata_without_the_file(tmp_path):
    with pytest.raises(DataError, match="metadata.csv: expected an LJSpeech metadata.csv.*found no such file"):
        read_metadata(tmp_path)
