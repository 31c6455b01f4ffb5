"""WAV files: a pure-Python RIFF/WAVE parser, the TF-readability check, a decoder and a writer.

``inspect_wav`` reads a file the way the RIFF specification describes it: chunks in any order, odd-sized
chunks followed by a pad byte, LIST/JUNK/other chunks skipped. It raises ``DataError`` for what is not a
WAV file at all (missing, empty, not RIFF/WAVE, truncated, no fmt or data chunk).

``check_tf_readable`` answers a narrower question: will the TF-native loader read this file, through
``tf.audio.decode_wav``, and is it what the corpus promises (sample rate, channels)? ``decode_wav``
(tensorflow/core/lib/wav/wav_io.cc) is much stricter than the specification:

* only format tag 1 (PCM) with 16 bits per sample: 8/24/32-bit PCM, IEEE float (3) and
  WAVE_FORMAT_EXTENSIBLE (0xFFFE, even with a 16-bit PCM sub-format) all fail;
* a fmt chunk of 16 or 18 bytes only; block align and byte rate consistent with the format;
* before fmt it skips only JUNK, bext, iXML, qlty, mext, levl, link and axml chunks (a LIST there fails);
* it never skips RIFF pad bytes, so an odd-sized chunk before the data desynchronises it;
* after fmt it walks chunk headers to the end of the file: 1-7 stray trailing bytes, a second data
  chunk, or a chunk size above 2**31 - 1 (a streamed WAV's 0xFFFFFFFF) fail; a data chunk must hold
  all the whole frames its size declares.

``_tf_walk`` mirrors that walk step by step, and ``check_tf_readable`` gives its verdict (so it also
accepts what TF reads though RIFF forbids it, e.g. an odd-sized chunk left without its pad byte, and
locates the samples where TF does). The tests check the verdict against the real ``tf.audio.decode_wav``
on every fixture and on random chunk layouts. On top, the loader's policy rejects
a sample rate other than the expected one and more channels than asked for (``decode_wav`` would drop
them silently). ``read_wav`` applies exactly the same validation, so both loaders accept the same files.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfsuite.errors import DataError
from perfsuite.files import write_atomic
from perfsuite.records import Record

WAVE_FORMAT_PCM = 0x0001
WAVE_FORMAT_IEEE_FLOAT = 0x0003
WAVE_FORMAT_EXTENSIBLE = 0xFFFE
FORMAT_NAMES = {
    0x0001: "PCM",
    0x0002: "Microsoft ADPCM",
    0x0003: "IEEE float",
    0x0006: "A-law",
    0x0007: "mu-law",
    0x0011: "IMA ADPCM",
    0x0055: "MPEG layer 3",
    0xFFFE: "WAVE_FORMAT_EXTENSIBLE",
}
# The chunks tf.audio.decode_wav skips between "WAVE" and "fmt " (wav_io.cc); anything else fails there.
TF_SKIPPED_BEFORE_FMT = (b"JUNK", b"bext", b"iXML", b"qlty", b"mext", b"levl", b"link", b"axml")
_INT32_MAX = 2**31 - 1
_STREAMED_SIZE = 0xFFFFFFFF




@dataclass(frozen=True)
class WavInfo(Record):
    """What a WAV header says. ``num_frames`` counts whole sample frames (one sample per channel)."""

    path: str
    format_tag: int
    channels: int
    sample_rate: int
    bits_per_sample: int
    num_frames: int
    data_offset: int
    data_bytes: int

    @property
    def block_align(self) -> int:
        return self.channels * ((self.bits_per_sample + 7) // 8)

    @property
    def duration_s(self) -> float:
        return self.num_frames / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True)
class _Fmt:
    format_tag: int
    channels: int
    sample_rate: int
    byte_rate: int
    block_align: int
    bits_per_sample: int
    sub_format_tag: int | None  # first two bytes of the EXTENSIBLE sub-format GUID


def _describe_format(fmt: _Fmt) -> str:
    """E.g. '24-bit PCM' or 'WAVE_FORMAT_EXTENSIBLE (0xFFFE) with 16-bit PCM sub-format'."""
    def name(tag):
        return FORMAT_NAMES.get(tag, f"format tag {tag:#06x}")

    if fmt.format_tag == WAVE_FORMAT_EXTENSIBLE:
        sub = "an unreadable" if fmt.sub_format_tag is None else f"{fmt.bits_per_sample}-bit " + name(
            fmt.sub_format_tag
        )
        return f"WAVE_FORMAT_EXTENSIBLE (0xFFFE) with {sub} sub-format"
    return f"{fmt.bits_per_sample}-bit {name(fmt.format_tag)} (format tag {fmt.format_tag})"


def _parse_fmt(path, body: bytes) -> _Fmt:
    if len(body) < 16:
        raise DataError(path, "a 'fmt ' chunk of at least 16 bytes", f"{len(body)} bytes")
    tag, channels, rate, byte_rate, block_align, bits = struct.unpack("<HHIIHH", body[:16])
    sub = None
    if tag == WAVE_FORMAT_EXTENSIBLE and len(body) >= 26:
        (sub,) = struct.unpack("<H", body[24:26])
    return _Fmt(tag, channels, rate, byte_rate, block_align, bits, sub)


def _open(path):
    """Open for reading, turning 'no such file' and friends into DataError."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "an existing file", "no such file")
    if not path.is_file():
        raise DataError(path, "a regular file", "a directory" if path.is_dir() else "not a regular file")
    try:
        return open(path, "rb")
    except OSError as error:
        raise DataError(path, "a readable file", f"{type(error).__name__}: {error.strerror}") from error


def _check_riff_header(path, head: bytes, file_size: int) -> None:
    if file_size == 0:
        raise DataError(path, "a RIFF/WAVE file", "an empty file (0 bytes)")
    if not head.startswith(b"RIFF"[: len(head)]) or (len(head) >= 12 and head[8:12] != b"WAVE"):
        kind = f"RIFF type {head[8:12]!r}" if head.startswith(b"RIFF") else f"leading bytes {head[:12]!r}"
        raise DataError(path, "a RIFF/WAVE file", f"{kind} (not a WAV file)")
    if file_size < 12:
        raise DataError(path, "a 12-byte RIFF/WAVE header", f"a truncated file of {file_size} bytes")


def inspect_wav(path) -> WavInfo:
    """Parse the RIFF chunks of ``path`` (headers only) by the specification; see the module docstring."""
    return _inspect(path)[0]


def _inspect(path) -> tuple[WavInfo, _Fmt]:
    with _open(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        _check_riff_header(path, f.read(12), file_size)
        fmt, data, seen = None, None, []
        offset = 12
        while offset + 8 <= file_size and (fmt is None or data is None):
            f.seek(offset)
            chunk_id, size = struct.unpack("<4sI", f.read(8))
            seen.append(chunk_id.decode("latin-1"))
            body = offset + 8
            if chunk_id == b"fmt ":
                if body + size > file_size:
                    raise DataError(
                        path, f"a 'fmt ' chunk of {size} bytes", f"{file_size - body} bytes (truncated file)"
                    )
                fmt = _parse_fmt(path, f.read(size))
            elif chunk_id == b"data" and data is None:
                data = (body, size)
            elif body + size > file_size:
                break  # a chunk running past the end; whatever is still missing is reported below
            offset = body + size + (size & 1)  # odd-sized chunks are followed by a pad byte
    chunks = ", ".join(repr(c) for c in seen) or "no chunks"
    if fmt is None:
        raise DataError(path, "a 'fmt ' chunk", f"none (chunks: {chunks}; file is {file_size} bytes)")
    if data is None:
        raise DataError(path, "a 'data' chunk", f"none (chunks: {chunks}; file is {file_size} bytes)")
    if fmt.block_align == 0 or fmt.channels == 0:
        raise DataError(
            path,
            "a 'fmt ' chunk with at least one channel and a block align above 0",
            f"{fmt.channels} channels, block align {fmt.block_align}",
        )
    data_offset, data_bytes = data
    num_frames = data_bytes // fmt.block_align
    available = file_size - data_offset
    if num_frames * fmt.block_align > available:
        streamed = " (0xFFFFFFFF: a streamed WAV whose sizes were never filled in)"
        raise DataError(
            path,
            f"a 'data' chunk of {data_bytes} bytes" + (streamed if data_bytes == _STREAMED_SIZE else ""),
            f"{available} bytes before the end of the file (truncated)",
        )
    info = WavInfo(
        path=str(path),
        format_tag=fmt.format_tag,
        channels=fmt.channels,
        sample_rate=fmt.sample_rate,
        bits_per_sample=fmt.bits_per_sample,
        num_frames=num_frames,
        data_offset=data_offset,
        data_bytes=data_bytes,
    )
    return info, fmt


def _tf_walk(f, file_size: int) -> tuple[_Fmt, int, int] | str:
    """Walk the chunks exactly as tf.audio.decode_wav does (DecodeLin16WaveAsFloatVector in
    tensorflow/core/lib/wav/wav_io.cc: same offsets, checks and order). Returns the fmt, the data
    offset and the declared data size TF reads, or why TF fails on this file.
    """
    def read(offset, n):  # None where TF's IncrementOffset would report "Data too short"
        if offset + n > file_size:
            return None
        f.seek(offset)
        return f.read(n)

    if read(0, 4) != b"RIFF" or read(8, 4) != b"WAVE":
        return "no RIFF/WAVE header"
    offset = 12
    chunk_id = read(offset, 4)
    while chunk_id != b"fmt ":
        if chunk_id is None:
            return f"the file ending at byte {file_size} while it looks for the 'fmt ' chunk"
        if chunk_id not in TF_SKIPPED_BEFORE_FMT:
            allowed = ", ".join(c.decode() for c in TF_SKIPPED_BEFORE_FMT)
            return f"chunk {chunk_id!r} at byte {offset} before 'fmt ' (it skips only {allowed} there)"
        size_bytes = read(offset + 4, 4)
        if size_bytes is None or offset + 8 + struct.unpack("<I", size_bytes)[0] > file_size:
            return f"chunk {chunk_id!r} at byte {offset} running past the end of the file"
        offset += 8 + struct.unpack("<I", size_bytes)[0]  # TF skips no pad byte here
        chunk_id = read(offset, 4)
    header = read(offset + 4, 20)
    if header is None:
        return "a 'fmt ' chunk cut off by the end of the file"
    (fmt_size,) = struct.unpack("<I", header[:4])
    fmt = _parse_fmt("", header[4:])
    expected_block_align = (fmt.bits_per_sample * fmt.channels + 7) // 8
    problems = [
        (fmt_size not in (16, 18), f"a 'fmt ' chunk of {fmt_size} bytes (it reads only 16 or 18)"),
        (fmt.format_tag != WAVE_FORMAT_PCM, _describe_format(fmt)),
        (fmt.channels < 1, "0 channels"),
        (fmt.bits_per_sample != 16, _describe_format(fmt)),
        (fmt.block_align != expected_block_align,
         f"block align {fmt.block_align}, not {expected_block_align}"),
        (fmt.byte_rate != fmt.block_align * fmt.sample_rate,
         f"byte rate {fmt.byte_rate}, not block align {fmt.block_align} x sample rate {fmt.sample_rate}"),
    ]
    for failed, found in problems:
        if failed:
            return found
    offset += 8 + 16 + (2 if fmt_size == 18 else 0)
    data = None
    while offset < file_size:
        chunk_header = read(offset, 8)
        if chunk_header is None:
            return f"{file_size - offset} stray bytes at byte {offset} where it reads an 8-byte chunk header"
        chunk_id, size = struct.unpack("<4sI", chunk_header)
        offset += 8
        if size > _INT32_MAX:
            return f"chunk {chunk_id!r} declaring {size:#x} bytes (its limit is 2**31 - 1)"
        if chunk_id == b"data":
            if data is not None:
                return "a second 'data' chunk"
            data = (offset, size)
            whole_frames_bytes = (size // fmt.block_align) * fmt.block_align
            if offset + whole_frames_bytes > file_size:
                left = file_size - offset
                return f"a 'data' chunk of {size} bytes with {left} left in the file (truncated)"
            offset += whole_frames_bytes  # a partial trailing frame is read as the next chunk header
        else:
            offset += size  # TF skips no pad byte here either
    if data is None:
        return "no 'data' chunk where it looks for one (it does not skip pad bytes after odd-sized chunks)"
    return fmt, *data


def check_tf_readable(path, *, sample_rate: int, channels: int = 1) -> WavInfo:
    """Raise DataError unless the TF-native loader can read ``path`` and it matches the corpus.

    The verdict is tf.audio.decode_wav's (mirrored by ``_tf_walk``) plus the sample-rate/channel
    policy; the returned WavInfo locates the samples where decode_wav finds them.
    """
    with _open(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        _check_riff_header(path, f.read(12), file_size)
        walked = _tf_walk(f, file_size)
    if isinstance(walked, str):
        # Explain through the specification-level parse where it finds the file broken (truncated,
        # no data, ...) or in a format TF does not read; else name the TF-specific layout problem.
        _, fmt = _inspect(path)
        if fmt.format_tag != WAVE_FORMAT_PCM or fmt.bits_per_sample != 16:
            raise DataError(
                path, "16-bit PCM (format tag 1), the only format tf.audio.decode_wav reads",
                _describe_format(fmt),
            )
        raise DataError(path, "a WAV layout tf.audio.decode_wav can parse", walked)
    fmt, data_offset, data_bytes = walked
    if fmt.sample_rate != sample_rate:
        raise DataError(path, f"a sample rate of {sample_rate} Hz", f"{fmt.sample_rate} Hz")
    if fmt.channels > channels:
        raise DataError(path, f"at most {channels} channel(s)", f"{fmt.channels} channels")
    return WavInfo(
        path=str(path),
        format_tag=fmt.format_tag,
        channels=fmt.channels,
        sample_rate=fmt.sample_rate,
        bits_per_sample=fmt.bits_per_sample,
        num_frames=data_bytes // fmt.block_align,
        data_offset=data_offset,
        data_bytes=data_bytes,
    )


def read_wav(path, *, sample_rate: int, channels: int = 1) -> np.ndarray:
    """Decode 16-bit PCM to float32 in [-1, 1) (sample / 32768), validated like check_tf_readable.

    Returns 1-D audio for ``channels == 1``; otherwise ``[frames, channels]`` filled the way
    tf.audio.decode_wav fills it (missing channels repeat the file's last channel).
    """
    info = check_tf_readable(path, sample_rate=sample_rate, channels=channels)
    with open(path, "rb") as f:
        f.seek(info.data_offset)
        raw = f.read(info.num_frames * info.block_align)
    samples = np.frombuffer(raw, dtype="<i2").reshape(info.num_frames, info.channels)
    audio = samples.astype(np.float32) / np.float32(32768.0)
    if channels == 1:
        return audio[:, 0]
    pick = np.minimum(np.arange(channels), info.channels - 1)
    return audio[:, pick]


def write_wav(path, samples: np.ndarray, *, sample_rate: int) -> None:
    """Write 1-D int16 ``samples`` as a 44-byte-header 16-bit PCM mono WAV, atomically."""
    samples = np.asarray(samples)
    if samples.dtype != np.int16 or samples.ndim != 1:
        raise ValueError(
            f"{path}: expected 1-D int16 samples, found {samples.ndim}-D {samples.dtype}"
        )
    if not 0 < sample_rate < 2**32:
        raise ValueError(f"{path}: expected a sample rate in (0, 2**32), found {sample_rate}")
    data = samples.astype("<i2").tobytes()
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", 36 + len(data), b"WAVE",
        b"fmt ", 16, WAVE_FORMAT_PCM, 1, sample_rate, 2 * sample_rate, 2, 16,
        b"data", len(data),
    )
    path = Path(path)
    write_atomic(path, header + data)
