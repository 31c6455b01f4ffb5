"""WAV parsing, the TF-readability verdict (checked against tf.audio.decode_wav itself), read and write."""

import os
import pickle
import re
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfsuite._tensorflow import tensorflow
from perfsuite.data.wav import check_tf_readable, inspect_wav, read_wav, write_wav
from perfsuite.errors import DataError

tf = tensorflow()

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wav"
RATE = 22050


def readme_verdicts() -> dict[str, bool]:
    """file -> 'TF-native readable' from the table in fixtures/wav/README.md."""
    verdicts = {}
    for line in (FIXTURES / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].endswith(".wav"):
            verdicts[cells[0]] = {"yes": True, "no": False}[cells[2]]
    return verdicts


VERDICTS = readme_verdicts()
GOOD = sorted(name for name, ok in VERDICTS.items() if ok)
BAD = sorted(name for name, ok in VERDICTS.items() if not ok)


def tf_decode(raw: bytes):
    """(audio [frames, file channels], sample rate) from tf.audio.decode_wav, or None if it fails."""
    try:
        audio, rate = tf.audio.decode_wav(tf.constant(raw), desired_channels=-1)
    # TF quotes the bad chunk id in its message; when those bytes are not UTF-8, turning the message into
    # a Python exception itself fails with UnicodeDecodeError.
    except (tf.errors.InvalidArgumentError, UnicodeDecodeError):
        return None
    return audio.numpy(), int(rate)


def loader_accepts(raw: bytes) -> bool:
    """What the TF-native loader must do: decode_wav succeeds and the file is 22050 Hz mono."""
    decoded = tf_decode(raw)
    return decoded is not None and decoded[1] == RATE and decoded[0].shape[1] == 1


def our_verdict(path) -> bool:
    try:
        check_tf_readable(path, sample_rate=RATE, channels=1)
    except DataError:
        return False
    return True


def test_every_fixture_is_in_the_readme_table():
    on_disk = {p.name for p in FIXTURES.glob("*.wav")}
    assert on_disk == set(VERDICTS)
    assert len(GOOD) >= 5 and len(BAD) >= 12
    assert all(p.stat().st_size < 5000 for p in FIXTURES.glob("*.wav"))


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_fixture_verdict_matches_tensorflow(name):
    path = FIXTURES / name
    truth = loader_accepts(path.read_bytes())
    assert our_verdict(path) == truth
    assert VERDICTS[name] == truth, "fixtures/wav/README.md is out of date"


@pytest.mark.parametrize(
    "name, found",
    [
        ("pcm8.wav", "8-bit PCM"),
        ("pcm24.wav", "24-bit PCM"),
        ("pcm32.wav", "32-bit PCM"),
        ("float32.wav", "IEEE float (format tag 3)"),
        ("mulaw.wav", "mu-law"),
        ("extensible_16bit.wav", "WAVE_FORMAT_EXTENSIBLE (0xFFFE) with 16-bit PCM sub-format"),
        ("stereo_16bit.wav", "found 2 channels"),
        ("rate_16000.wav", "found 16000 Hz"),
        ("list_before_fmt.wav", "b'LIST'"),
        ("odd_size_list_chunk.wav", "pad bytes"),
        ("streamed_unknown_size.wav", "0xFFFFFFFF"),
        ("trailing_garbage.wav", "3 stray bytes"),
        ("truncated_data.wav", "truncated"),
        ("truncated_header.wav", "truncated"),
        ("empty.wav", "empty file"),
        ("not_a_wav.wav", "not a WAV file"),
    ],
)
def test_bad_fixture_error_names_file_expectation_and_finding(name, found):
    path = FIXTURES / name
    with pytest.raises(DataError) as caught:
        check_tf_readable(path, sample_rate=RATE)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.path == str(path)
    assert str(error) == f"{path}: expected {error.expected}, found {error.found}"
    assert found in str(error)
    with pytest.raises(DataError, match="^" + re.escape(f"{path}: expected ")):
        read_wav(path, sample_rate=RATE)


def test_bad_fixtures_cover_every_rejection_kind():
    assert set(BAD) >= {
        "pcm8.wav", "pcm24.wav", "pcm32.wav", "float32.wav", "extensible_16bit.wav", "stereo_16bit.wav",
        "rate_16000.wav", "truncated_data.wav", "truncated_header.wav", "empty.wav", "not_a_wav.wav",
    }


@pytest.mark.parametrize("function", [inspect_wav, check_tf_readable, read_wav])
def test_missing_file_is_a_data_error(tmp_path, function):
    path = tmp_path / "nope.wav"
    kwargs = {} if function is inspect_wav else {"sample_rate": RATE}
    with pytest.raises(DataError, match=re.escape(f"{path}: expected an existing file, found no such file")):
        function(path, **kwargs)


def test_directory_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="expected a regular file, found a directory"):
        inspect_wav(tmp_path)


def test_data_error_survives_pickling():
    error = pickle.loads(pickle.dumps(DataError("a.wav", "16-bit PCM", "24-bit PCM")))
    assert (error.path, error.expected, error.found) == ("a.wav", "16-bit PCM", "24-bit PCM")
    assert str(error) == "a.wav: expected 16-bit PCM, found 24-bit PCM"


@pytest.mark.parametrize("name", GOOD)
def test_read_wav_equals_decode_wav(name):
    path = FIXTURES / name
    expected, rate = tf_decode(path.read_bytes())
    audio = read_wav(path, sample_rate=RATE)
    assert audio.dtype == np.float32 and audio.ndim == 1
    np.testing.assert_array_equal(audio, expected[:, 0])
    info = inspect_wav(path)
    assert (info.sample_rate, info.channels, info.num_frames) == (rate, 1, expected.shape[0])


def test_inspect_wav_reports_chunk_layout():
    info = inspect_wav(FIXTURES / "good_with_list_chunk.wav")
    assert (info.format_tag, info.channels, info.sample_rate, info.bits_per_sample) == (1, 1, RATE, 16)
    assert (info.data_offset, info.data_bytes, info.num_frames) == (12 + 24 + 34 + 8, 2200, 1100)
    # Spec-valid files TF cannot read still parse: pad bytes skipped, fmt found after other chunks.
    assert inspect_wav(FIXTURES / "odd_size_list_chunk.wav").num_frames == 1100
    assert inspect_wav(FIXTURES / "list_before_fmt.wav").num_frames == 1100
    assert inspect_wav(FIXTURES / "extensible_16bit.wav").format_tag == 0xFFFE
    assert inspect_wav(FIXTURES / "float32.wav").bits_per_sample == 32


@pytest.mark.parametrize("name, channels", [("good_16bit_mono_22050.wav", 2), ("stereo_16bit.wav", 2),
                                             ("stereo_16bit.wav", 3)])
def test_read_wav_fills_channels_like_decode_wav(name, channels):
    path = FIXTURES / name
    audio, _ = tf.audio.decode_wav(tf.io.read_file(str(path)), desired_channels=channels)
    np.testing.assert_array_equal(read_wav(path, sample_rate=RATE, channels=channels), audio.numpy())


@given(samples=st.lists(st.integers(-32768, 32767), max_size=3000), rate=st.sampled_from([8000, RATE, 48000]))
def test_write_wav_round_trip(samples, rate):
    samples = np.array(samples, dtype=np.int16)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "out.wav"
        path.write_bytes(b"old contents")
        write_wav(path, samples, sample_rate=rate)
        assert os.listdir(directory) == ["out.wav"], "the temporary file was renamed, not left behind"
        assert path.stat().st_size == 44 + 2 * len(samples)
        audio = read_wav(path, sample_rate=rate)
        np.testing.assert_array_equal(audio, samples.astype(np.float32) / 32768)
        decoded, decoded_rate = tf_decode(path.read_bytes())
        assert decoded_rate == rate
        np.testing.assert_array_equal(decoded[:, 0], audio)


def test_write_wav_rejects_what_it_cannot_write_exactly(tmp_path):
    with pytest.raises(ValueError, match="expected 1-D int16 samples, found 1-D float32"):
        write_wav(tmp_path / "a.wav", np.zeros(4, np.float32), sample_rate=RATE)
    with pytest.raises(ValueError, match="found 2-D int16"):
        write_wav(tmp_path / "a.wav", np.zeros((2, 2), np.int16), sample_rate=RATE)
    with pytest.raises(FileNotFoundError):
        write_wav(tmp_path / "missing" / "a.wav", np.zeros(4, np.int16), sample_rate=RATE)
    assert list(tmp_path.iterdir()) == []


# Random chunk layouts: check_tf_readable must reject every file tf.audio.decode_wav rejects (or the
# policy does) and accept every other one -- including files that break RIFF the way TF tolerates.


def _chunk(chunk_id: bytes, body: bytes, pad: bool) -> bytes:
    return chunk_id + struct.pack("<I", len(body)) + body + (b"\0" if pad and len(body) % 2 else b"")


other_chunks = st.lists(
    st.tuples(st.sampled_from([b"JUNK", b"bext", b"LIST", b"fact", b"data"]), st.integers(0, 9)), max_size=2
)


FAULTS = ["format tag", "bits", "channels", "rate", "block align", "fmt size", "odd data", "unpadded",
          "trailing bytes", "cut"]


@st.composite
def wav_layouts(draw):
    """A 16-bit mono 22050 Hz file with random extra chunks (some odd-sized, some where TF does not
    expect them) and up to three faults."""
    faults = draw(st.sets(st.sampled_from(FAULTS), max_size=3))

    def pick(fault, good, bad):
        return draw(st.sampled_from(bad)) if fault in faults else good

    tag = pick("format tag", 1, [3, 0xFFFE, 7])
    bits = pick("bits", 16, [8, 24, 32])
    channels = pick("channels", 1, [0, 2])
    rate = pick("rate", RATE, [16000, 44100])
    block_align = channels * bits // 8 + pick("block align", 0, [1, 2])
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block_align, block_align, bits)
    fmt += pick("fmt size", b"", [b"\0\0", b"\0\0\0\0", b"\0" * 24])
    frames = draw(st.integers(0, 20))
    data = draw(st.binary(min_size=frames * block_align, max_size=frames * block_align))
    data += pick("odd data", b"", [b"\1", b"\1\2\3"])
    pad = "unpadded" not in faults

    def chunks(spec):
        return b"".join(_chunk(cid, bytes(range(7, 7 + size)), pad) for cid, size in spec)

    before_fmt, before_data, after_data = draw(other_chunks), draw(other_chunks), draw(other_chunks)
    body = b"WAVE" + chunks(before_fmt) + _chunk(b"fmt ", fmt, pad) + chunks(before_data)
    body += _chunk(b"data", data, pad) + chunks(after_data)
    body += pick("trailing bytes", b"", [bytes(n) for n in range(1, 10)])
    raw = b"RIFF" + struct.pack("<I", len(body)) + body
    if "cut" in faults:
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


@given(layout=wav_layouts())
def test_verdict_matches_decode_wav_on_random_layouts(layout):
    raw = layout
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "x.wav"
        path.write_bytes(raw)
        ours = our_verdict(path)
        truth = loader_accepts(raw)
        if truth and ours:
            np.testing.assert_array_equal(read_wav(path, sample_rate=RATE), tf_decode(raw)[0][:, 0])
    assert ours == truth, "accepted a file TF cannot read" if ours else "rejected a file TF reads"
