"""Bad input: every unreadable WAV or `.npy` is a DataError naming the file, or a counted skip.

The WAVs are the real-world variants in fixtures/wav/ (see its README), copied into small
LJSpeech-layout datasets next to utterances of the tiny corpus. With ``on_error="raise"`` the first
bad file stops the loader with a DataError that names it, the expectation and what was found; with
``on_error="skip"`` it is left out and listed in ``Loader.skipped``, and every other id arrives with
its own data (never a dummy sample).
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

from perfsuite._tensorflow import tensorflow
from perfsuite.data.audio import MelConfig, log_mel_numpy
from perfsuite.data.corpus import cache_paths, read_metadata, save_npy_atomic
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.data.wav import read_wav
from perfsuite.errors import DataError

tf = tensorflow()


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wav"
MEL = MelConfig()
WAV_KINDS = ["tf_native", "numpy_function"]
# The ways to read: each loader kind, and the TF-native one with its headers parsed in the graph too.
READERS = {"tf_native": {"kind": "tf_native"}, "tf_native-in_graph": {"kind": "tf_native", "decode": "in_graph"},
           "numpy_function": {"kind": "numpy_function"}}

# Unreadable fixture -> a phrase the DataError's "found" must hold.
BAD_WAVS = {
    "pcm8": "8-bit PCM",
    "pcm24": "24-bit PCM",
    "pcm32": "32-bit PCM",
    "float32": "IEEE float",
    "mulaw": "mu-law",
    "extensible_16bit": "WAVE_FORMAT_EXTENSIBLE",
    "truncated_data": "truncated",
    "truncated_header": "truncated",
    "streamed_unknown_size": "truncated",
    "empty": "empty file",
    "not_a_wav": "not a WAV file",
    "list_before_fmt": "LIST",
    "odd_size_list_chunk": "no 'data' chunk",
    "trailing_garbage": "stray bytes",
    "rate_16000": "16000 Hz",  # the corpus is 22050 Hz
    "stereo_16bit": "2 channels",  # mono asked
}
GOOD_WAVS = sorted(p.stem for p in FIXTURES.glob("good_*.wav"))
MISSING = "missing_utterance"


def test_fixture_table_is_covered():
    assert sorted(BAD_WAVS) + GOOD_WAVS == sorted(
        [p.stem for p in FIXTURES.glob("*.wav") if not p.stem.startswith("good_")]) + GOOD_WAVS
    assert len(GOOD_WAVS) >= 5


def make_dataset(root: Path, tiny_corpus: Path, *, fixtures=(), missing=False, good=3) -> Path:
    """An LJSpeech-layout dataset: ``good`` tiny-corpus utterances, then the named fixture WAVs."""
    (root / "wavs").mkdir(parents=True)
    lines = []
    for utt in read_metadata(tiny_corpus)[:good]:
        shutil.copy(tiny_corpus / "wavs" / f"{utt.id}.wav", root / "wavs")
        lines.append(f"{utt.id}|{utt.text}|{utt.normalized_text}")
    for name in fixtures:
        shutil.copy(FIXTURES / f"{name}.wav", root / "wavs")
        lines.append(f"{name}|A test tone.|A test tone.")
    if missing:
        lines.append(f"{MISSING}|Not there.|Not there.")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root


def collect(loader) -> dict[str, np.ndarray]:
    """id -> mel[:mel_len] over one epoch, each id once."""
    mels = {}
    for batch in loader.dataset:
        for utt_id, mel, mel_len in zip(batch["id"].numpy(), batch["mel"].numpy(), batch["mel_len"].numpy()):
            assert utt_id.decode() not in mels
            assert np.all(mel[mel_len:] == 0)
            mels[utt_id.decode()] = mel[:mel_len]
    return mels


# --- WAV ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", WAV_KINDS)
@pytest.mark.parametrize("name", [*BAD_WAVS, MISSING])
def test_unreadable_wav_raises_naming_the_file(tmp_path, tiny_corpus, kind, name):
    is_missing = name == MISSING
    dataset = make_dataset(tmp_path, tiny_corpus, fixtures=() if is_missing else [name], missing=is_missing)
    with pytest.raises(DataError) as error:
        build_loader(dataset_dir=dataset, config=LoaderConfig(kind=kind, source="wav", on_error="raise"))
    assert error.value.path == str(dataset / "wavs" / f"{name}.wav")
    assert error.value.expected
    assert (BAD_WAVS.get(name) or "no such file") in error.value.found
    assert str(error.value) == f"{error.value.path}: expected {error.value.expected}, found {error.value.found}"


@pytest.mark.parametrize("kind", WAV_KINDS)
def test_unreadable_wavs_are_skipped_and_counted(tmp_path, tiny_corpus, kind):
    dataset = make_dataset(tmp_path, tiny_corpus, fixtures=[*BAD_WAVS, *GOOD_WAVS], missing=True)
    loader = build_loader(dataset_dir=dataset,
                          config=LoaderConfig(kind=kind, source="wav", batch_size=4, on_error="skip"))
    bad = sorted([*BAD_WAVS, MISSING])
    assert sorted(Path(s.path).stem for s in loader.skipped) == bad
    assert loader.skipped_count == len(bad)
    for skipped in loader.skipped:
        assert skipped.reason.startswith("expected ") and ", found " in skipped.reason
    readable = [u.id for u in read_metadata(dataset) if u.id not in bad]
    assert loader.num_samples == len(readable) == 3 + len(GOOD_WAVS)
    mels = collect(loader)
    assert sorted(mels) == sorted(readable)
    for utt_id in readable:  # each one its own data: the reference mel of its file
        expected = log_mel_numpy(read_wav(dataset / "wavs" / f"{utt_id}.wav", sample_rate=22050), MEL)
        np.testing.assert_allclose(mels[utt_id], expected, atol=1e-4, rtol=0, err_msg=utt_id)
    assert mels["good_zero_samples"].shape == (0, 80)


def test_only_unreadable_files_are_skipped(tmp_path, tiny_corpus):
    dataset = make_dataset(tmp_path, tiny_corpus, fixtures=GOOD_WAVS)
    loader = build_loader(dataset_dir=dataset, config=LoaderConfig(on_error="skip"))
    assert loader.skipped == () and loader.num_samples == 3 + len(GOOD_WAVS)


def test_a_dataset_with_nothing_readable_is_an_error(tmp_path, tiny_corpus):
    dataset = make_dataset(tmp_path, tiny_corpus, fixtures=["pcm24", "empty"], good=0)
    with pytest.raises(DataError, match="expected at least one readable utterance, found none .2 skipped"):
        build_loader(dataset_dir=dataset, config=LoaderConfig(on_error="skip"))


@pytest.mark.parametrize("reader", READERS)
def test_a_wav_broken_after_preflight_fails_the_epoch(tmp_path, tiny_corpus, reader):
    """The checks at build time are not the only guard: the load itself fails, it never substitutes."""
    dataset = make_dataset(tmp_path, tiny_corpus, good=2)
    loader = build_loader(dataset_dir=dataset, config=LoaderConfig(**READERS[reader], source="wav", batch_size=1))
    victim = dataset / "wavs" / f"{read_metadata(dataset)[1].id}.wav"
    shutil.copy(FIXTURES / "pcm24.wav", victim)
    with pytest.raises(tf.errors.OpError) as error:
        collect(loader)
    if reader != "tf_native-in_graph":  # decode_wav's own error does not name the file
        assert str(victim) in error.value.message


@pytest.mark.parametrize("change", ["same_size_new_header", "appended", "truncated"])
def test_a_wav_changed_after_preflight_is_refused_by_the_layout_check(tmp_path, tiny_corpus, change):
    """Header bytes and size are verified on every read: a stale layout is an error, never misread samples."""
    dataset = make_dataset(tmp_path, tiny_corpus, good=2)
    loader = build_loader(dataset_dir=dataset, config=LoaderConfig(source="wav", batch_size=1))
    victim = dataset / "wavs" / f"{read_metadata(dataset)[1].id}.wav"
    data = bytearray(victim.read_bytes())
    if change == "same_size_new_header":
        data[24:28] = (16000).to_bytes(4, "little")  # another sample rate in the fmt chunk
    elif change == "appended":
        data += b"\0\0"
    else:
        del data[-2:]
    victim.write_bytes(bytes(data))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        collect(loader)
    assert str(victim) in error.value.message and "header and size" in error.value.message


# --- .npy cache --------------------------------------------------------------------------------------


def npy_bytes(array: np.ndarray, *, version: int = 1, align: int = 64, extra_padding: int = 0) -> bytes:
    """A `.npy` file written by hand: header ``version``, padded to ``align`` bytes (numpy < 1.14 used 16)."""
    descr = np.lib.format.dtype_to_descr(array.dtype)
    header = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {array.shape!r}, }}" + " " * extra_padding
    prefix = 10 if version == 1 else 12
    header += " " * (-(prefix + len(header) + 1) % align) + "\n"
    length = len(header).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode("latin1") + array.tobytes()


def make_cache_dataset(root: Path, tiny_corpus: Path, tiny_cache: Path, variants: dict) -> tuple[Path, Path]:
    """A dataset whose metadata lists 3 tiny utterances with their cache files, then one id per variant.

    ``variants`` maps an id to (mel bytes or None for no file, tokens bytes or None), built from the
    arrays of the first tiny utterance.
    """
    cache = root / "cache"
    (cache / "mels").mkdir(parents=True)
    (cache / "tokens").mkdir()
    utterances = read_metadata(tiny_corpus)[:3]
    for utt in utterances:
        for source, target in zip(cache_paths(tiny_cache, utt.id), cache_paths(cache, utt.id)):
            shutil.copy(source, target)
    for utt_id, files in variants.items():
        for content, target in zip(files, cache_paths(cache, utt_id)):
            if content is not None:
                target.write_bytes(content)
    lines = [f"{u.id}|{u.text}|{u.normalized_text}" for u in utterances] + [f"{v}|Text.|Text." for v in variants]
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root, cache


@pytest.fixture(scope="module")
def arrays(tiny_corpus, tiny_cache):
    mel_path, tokens_path = cache_paths(tiny_cache, read_metadata(tiny_corpus)[0].id)
    mel, tokens = np.load(mel_path), np.load(tokens_path)
    assert mel.shape[0] > 1 and tokens.shape[0] > 1
    return mel, tokens


def malformed(mel, tokens) -> dict[str, tuple[bytes | None, bytes | None, int, str]]:
    """id -> (mel bytes, tokens bytes, which file is bad (0 mel, 1 tokens), phrase in "found")."""
    good_mel, good_tokens = npy_bytes(mel), npy_bytes(tokens)
    return {
        "bad_magic": (b"\x00" + good_mel[1:], good_tokens, 0, "magic"),
        "fortran_order": (_saved(np.asfortranarray(mel)), good_tokens, 0, "fortran_order True"),
        "float64_mel": (npy_bytes(mel.astype(np.float64)), good_tokens, 0, "'<f8'"),
        "int64_tokens": (good_mel, npy_bytes(tokens.astype(np.int64)), 1, "'<i8'"),
        "truncated_mel": (good_mel[:-10], good_tokens, 0, "bytes"),
        "empty_mel": (b"", good_tokens, 0, ""),
        "header_only": (good_mel[:128], good_tokens, 0, "bytes"),
        "mel_1d": (npy_bytes(mel.ravel()), good_tokens, 0, "shape"),
        "mel_40_channels": (npy_bytes(mel[:, :40].copy()), good_tokens, 0, "shape"),
        "unknown_version": (good_mel[:6] + b"\x09\x00" + good_mel[8:], good_tokens, 0, "version"),
        "no_tokens_file": (good_mel, None, 1, "no such file"),
    }


def _saved(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)  # np.save keeps Fortran order in the header
    return buffer.getvalue()


@pytest.mark.parametrize("kind", WAV_KINDS)
def test_malformed_npy_raises_naming_the_file(tmp_path, tiny_corpus, tiny_cache, arrays, kind):
    for utt_id, (mel, tokens, bad_index, found) in malformed(*arrays).items():
        dataset, cache = make_cache_dataset(tmp_path / utt_id, tiny_corpus, tiny_cache, {utt_id: (mel, tokens)})
        with pytest.raises(DataError) as error:
            build_loader(dataset_dir=dataset, cache_dir=cache, config=LoaderConfig(kind=kind, source="cache"))
        assert error.value.path == str(cache_paths(cache, utt_id)[bad_index]), utt_id
        assert error.value.expected and found in error.value.found, (utt_id, str(error.value))


@pytest.mark.parametrize("kind", WAV_KINDS)
def test_malformed_npy_is_skipped_and_counted(tmp_path, tiny_corpus, tiny_cache, arrays, kind):
    variants = malformed(*arrays)
    dataset, cache = make_cache_dataset(tmp_path, tiny_corpus, tiny_cache,
                                        {utt_id: v[:2] for utt_id, v in variants.items()})
    loader = build_loader(dataset_dir=dataset, cache_dir=cache,
                          config=LoaderConfig(kind=kind, source="cache", batch_size=2, on_error="skip"))
    assert sorted(s.path for s in loader.skipped) == sorted(
        str(cache_paths(cache, utt_id)[v[2]]) for utt_id, v in variants.items())
    good = [u.id for u in read_metadata(tiny_corpus)[:3]]
    mels = collect(loader)
    assert sorted(mels) == sorted(good)
    for utt_id in good:
        np.testing.assert_array_equal(mels[utt_id], np.load(cache_paths(tiny_cache, utt_id)[0]))


@pytest.mark.parametrize("reader", READERS)
def test_unusual_but_valid_npy_headers_are_read_exactly(tmp_path, tiny_corpus, tiny_cache, arrays, reader):
    """Headers that are not 128 bytes long, and big-endian data: a fixed 128-byte skip fails here."""
    mel, tokens = arrays
    long_tokens = np.arange(1, 40, dtype=np.int32)
    variants = {
        "v1_align16": (npy_bytes(mel, align=16), npy_bytes(tokens, align=16), mel, tokens),  # 80-byte header
        "v2_align16": (npy_bytes(mel, version=2, align=16), npy_bytes(tokens, version=2, align=16), mel, tokens),
        "v3_long_header": (npy_bytes(mel, version=3, extra_padding=100),
                           npy_bytes(long_tokens, version=3, extra_padding=300), mel, long_tokens),
        "big_endian": (npy_bytes(mel.astype(">f4")), npy_bytes(tokens.astype(">i4")), mel, tokens),
    }
    for name, (mel_bytes, _, _, _) in variants.items():
        assert mel_bytes.index(b"\n") + 1 != 128 or name == "big_endian", name
    dataset, cache = make_cache_dataset(tmp_path, tiny_corpus, tiny_cache,
                                        {name: v[:2] for name, v in variants.items()})
    loader = build_loader(dataset_dir=dataset, cache_dir=cache,
                          config=LoaderConfig(**READERS[reader], source="cache", batch_size=3))
    assert loader.skipped == ()
    samples = {}
    for batch in loader.dataset:
        for utt_id, mel_row, mel_len, token_row, text_len in zip(*(batch[k].numpy() for k in (
                "id", "mel", "mel_len", "tokens", "text_len"))):
            samples[utt_id.decode()] = (mel_row[:mel_len], token_row[:text_len])
    for name, (_, _, expected_mel, expected_tokens) in variants.items():
        np.testing.assert_array_equal(samples[name][0], expected_mel, err_msg=name)
        np.testing.assert_array_equal(samples[name][1], expected_tokens, err_msg=name)
        assert samples[name][0].dtype == np.float32


@pytest.mark.parametrize("decode", ["preflight", "in_graph"])
def test_npy_broken_after_preflight_fails_naming_the_file(tmp_path, tiny_corpus, tiny_cache, arrays, decode):
    """The TF-native reader is a guard of its own: a Fortran-ordered mel is an error, never scrambled."""
    mel, tokens = arrays
    dataset, cache = make_cache_dataset(tmp_path, tiny_corpus, tiny_cache, {"late": (npy_bytes(mel), npy_bytes(tokens))})
    loader = build_loader(dataset_dir=dataset, cache_dir=cache,
                          config=LoaderConfig(kind="tf_native", source="cache", batch_size=1, decode=decode))
    victim = cache_paths(cache, "late")[0]
    victim.write_bytes(_saved(np.asfortranarray(mel)))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        collect(loader)
    assert str(victim) in error.value.message and "fortran_order" in error.value.message


def test_save_npy_atomic_output_is_read_by_both_cache_loaders(tmp_path, tiny_corpus, tiny_cache, arrays):
    mel, tokens = arrays
    dataset, cache = make_cache_dataset(tmp_path, tiny_corpus, tiny_cache, {"saved": (None, None)})
    save_npy_atomic(cache_paths(cache, "saved")[0], np.asfortranarray(mel))  # saved as C order
    save_npy_atomic(cache_paths(cache, "saved")[1], tokens)
    for kind in WAV_KINDS:
        loader = build_loader(dataset_dir=dataset, cache_dir=cache, config=LoaderConfig(kind=kind, source="cache"))
        np.testing.assert_array_equal(collect(loader)["saved"], mel)


def test_a_tokens_file_changed_after_preflight_is_named(tmp_path, tiny_corpus, tiny_cache, arrays):
    mel, tokens = arrays
    dataset, cache = make_cache_dataset(tmp_path, tiny_corpus, tiny_cache, {"late": (npy_bytes(mel), npy_bytes(tokens))})
    loader = build_loader(dataset_dir=dataset, cache_dir=cache, config=LoaderConfig(source="cache", batch_size=1))
    victim = cache_paths(cache, "late")[1]
    victim.write_bytes(npy_bytes(np.concatenate([tokens, tokens])))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        collect(loader)
    message = error.value.message  # each file: [path] [unchanged] [size then] [size now] [its start now]
    assert f"[{victim}] [0]" in message and f"[{cache_paths(cache, 'late')[0]}] [1]" in message
    assert f"({2 * len(tokens)},)" in message  # the shape the changed file's header now gives
