"""Build an LJSpeech-layout directory of real recorded human speech from Debian packages.

No audio is committed to this repository: the recordings come from distribution packages, fetched
with ``apt-get download`` and unpacked with ``dpkg -x`` into a work directory (nothing is installed),
or read from the installed package when it is there.

Sources (``--sources``, comma-separated):

- ``alsa``: alsa-utils' ``/usr/share/sounds/alsa/*.wav``, the speaker-test voice saying each channel
  name ("Front center", "Rear left", ...): 8 recordings of about 1.3-1.5 s, 48 kHz mono 16-bit.
  ``Noise.wav`` is not speech and is left out. The transcript is the spoken channel name.
- ``asterisk``: asterisk-core-sounds-en-wav, the English IVR prompts recorded by Allison Smith
  (CC-BY-SA 3.0), 8 kHz mono 16-bit, with the transcripts of asterisk-core-sounds-en's
  ``core-sounds-en.txt``. Left out: entries without a recording or transcript, non-speech entries
  (``[beep]``-style transcripts), ellipsis fragments, numbers whose spoken form is ambiguous (>= 100,
  decimals), and recordings outside ``--min-seconds``..``--max-seconds`` (LJSpeech clips are 1-10 s).

Each recording is resampled to 22050 Hz with ``scipy.signal.resample_poly`` and written as 16-bit PCM
mono; nothing else is changed (no trimming, no gain). ``metadata.csv`` holds
``id|text|normalized text`` (numbers 0-99 spelled out in the normalized text). ``SOURCES.json``
records each package's version and the sha256 of its .deb, and per file its origin and original
sample rate. The output is the same for the same package versions.

Usage::

    python scripts/make_real_speech_dataset.py --out /tmp/real_speech                      # alsa: 8 files
    python scripts/make_real_speech_dataset.py --out /tmp/real_speech_ivr --sources alsa,asterisk
    perfsuite diagnose /tmp/real_speech --json /tmp/real_speech_out/diag.json --report /tmp/real_speech_out/report
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
import wave
from math import gcd
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

TARGET_RATE = 22050
ALSA_DIR = "usr/share/sounds/alsa"
ASTERISK_DIR = "usr/share/asterisk/sounds/en_US_f_Allison"
ASTERISK_TRANSCRIPTS = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
NOT_SPEECH = {"Noise"}  # alsa-utils: white noise, not a voice

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(number: int) -> str:
    if number < 20:
        return _ONES[number]
    tens, ones = divmod(number, 10)
    return _TENS[tens] + ("" if ones == 0 else "-" + _ONES[ones])


def normalize(text: str) -> str | None:
    """The spoken form of text: numbers 0-99 spelled out. None when a number's spoken form is ambiguous
    (>= 100 or a decimal: "500" may be "five hundred" or "five oh oh")."""
    if re.search(r"\d[.,]\d|\d{3,}", text):
        return None
    return re.sub(r"\d+", lambda match: number_words(int(match.group())), text)


# ------------------------------------------------------------------------------------ packages


def fetch_package(name: str, work: Path) -> tuple[Path, dict]:
    """Unpack package `name` into work/<name> (apt-get download + dpkg -x); return the root and its facts."""
    root = work / name
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    existing = sorted(debs.glob(f"{name}_*.deb"))
    if not existing:
        subprocess.run(["apt-get", "download", name], cwd=debs, check=True, stdout=subprocess.DEVNULL)
        existing = sorted(debs.glob(f"{name}_*.deb"))
    deb = existing[-1]
    if not root.is_dir():
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                             text=True).stdout.strip()
    return root, {"package": name, "version": version, "deb": deb.name,
                  "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()}


def package_root(name: str, relative: str, work: Path) -> tuple[Path, dict]:
    """Where `relative` of package `name` lies: the installed system's copy if present, else an unpacked .deb."""
    if (Path("/") / relative).exists():
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True,
                                 text=True, check=False).stdout.strip()
        return Path("/"), {"package": name, "version": version or "unknown", "deb": None, "sha256": None,
                           "installed": True}
    return fetch_package(name, work)


# ------------------------------------------------------------------------------------ sources


def alsa_recordings(work: Path):
    root, facts = package_root("alsa-utils", ALSA_DIR, work)
    for path in sorted((root / ALSA_DIR).glob("*.wav")):
        if path.stem in NOT_SPEECH:
            continue
        words = path.stem.split("_")  # Front_Center -> "Front center"
        text = " ".join([words[0].capitalize()] + [w.lower() for w in words[1:]]) + "."
        yield f"alsa_{path.stem}", path, text, text, facts


def asterisk_recordings(work: Path, skipped: list):
    root, facts = package_root("asterisk-core-sounds-en-wav", ASTERISK_DIR, work)
    text_root, text_facts = package_root("asterisk-core-sounds-en", ASTERISK_TRANSCRIPTS, work)
    transcripts = {}
    with gzip.open(text_root / ASTERISK_TRANSCRIPTS, "rt", encoding="utf-8", errors="replace") as lines:
        for line in lines:
            name, sep, text = line.partition(":")
            if sep and not line.startswith(";") and name.strip() and text.strip():
                transcripts[name.strip()] = " ".join(text.split())
    facts = {**facts, "transcripts": text_facts}
    for name, text in sorted(transcripts.items()):
        path = root / ASTERISK_DIR / f"{name}.wav"
        why = None
        if not path.is_file():
            why = "no recording"
        elif text.startswith("[") or "..." in text:
            why = "not speech, or a fragment"
        elif normalize(text) is None:
            why = "a number whose spoken form is ambiguous"
        if why:
            skipped.append({"source": f"asterisk:{name}", "reason": why})
            continue
        yield "asterisk_" + re.sub(r"[^A-Za-z0-9_-]", "_", name), path, text, normalize(text), facts


SOURCES = {"alsa": lambda work, skipped: alsa_recordings(work),
           "asterisk": asterisk_recordings}


# -------------------------------------------------------------------------------------- audio


def read_pcm16_mono(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as reader:
        if reader.getsampwidth() != 2 or reader.getnchannels() != 1 or reader.getcomptype() != "NONE":
            raise ValueError(f"{path}: expected 16-bit PCM mono, found {reader.getsampwidth() * 8}-bit, "
                             f"{reader.getnchannels()} channel(s), compression {reader.getcomptype()}")
        rate = reader.getframerate()
        samples = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    return samples, rate


def resample_to(samples: np.ndarray, rate: int, target: int) -> tuple[np.ndarray, int]:
    """samples at `target` Hz as int16 (polyphase resampling), and how many samples had to be clipped."""
    if rate == target:
        return samples.astype(np.int16), 0
    divisor = gcd(rate, target)
    resampled = np.round(resample_poly(samples.astype(np.float64), target // divisor, rate // divisor))
    clipped = int(np.count_nonzero((resampled < -32768) | (resampled > 32767)))
    return np.clip(resampled, -32768, 32767).astype(np.int16), clipped


def write_pcm16_mono(path: Path, samples: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(samples.astype("<i2").tobytes())


# --------------------------------------------------------------------------------------- main


def build(out: Path, *, sources: list[str], work: Path, min_seconds: float, max_seconds: float) -> dict:
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "wavs").mkdir(parents=True)
    files, skipped, packages, lines = [], [], {}, []
    for source in sources:
        for utt_id, path, text, normalized, facts in SOURCES[source](work, skipped):
            samples, rate = read_pcm16_mono(path)
            seconds = samples.size / rate
            if not min_seconds <= seconds <= max_seconds:
                skipped.append({"source": f"{source}:{path.stem}", "reason": f"{seconds:.2f} s, outside "
                                f"{min_seconds}-{max_seconds} s"})
                continue
            resampled, clipped = resample_to(samples, rate, TARGET_RATE)
            write_pcm16_mono(staging / "wavs" / f"{utt_id}.wav", resampled, TARGET_RATE)
            lines.append(f"{utt_id}|{text}|{normalized}\n")
            packages[facts["package"]] = facts
            files.append({"id": utt_id, "from": str(path), "original_rate": rate, "seconds": round(seconds, 3),
                          "clipped_samples": clipped})
    (staging / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    summary = {"sample_rate": TARGET_RATE, "format": "16-bit PCM mono", "resampler": "scipy.signal.resample_poly",
               "sources": sources, "packages": list(packages.values()), "files": files, "left_out": skipped,
               "total_seconds": round(sum(f["seconds"] for f in files), 2)}
    (staging / "SOURCES.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/real_speech"), metavar="DIR",
                        help="dataset directory to (re)create (default: %(default)s)")
    parser.add_argument("--sources", default="alsa", metavar="LIST",
                        help=f"comma-separated, from {sorted(SOURCES)} (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/real_speech_src"), metavar="DIR",
                        help="where .deb files are downloaded and unpacked (default: %(default)s)")
    parser.add_argument("--min-seconds", type=float, default=0.5, metavar="S",
                        help="shortest recording kept (default: %(default)s)")
    parser.add_argument("--max-seconds", type=float, default=10.0, metavar="S",
                        help="longest recording kept, as LJSpeech's 10 s (default: %(default)s)")
    args = parser.parse_args(argv)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown or not sources:
        parser.error(f"--sources: expected names from {sorted(SOURCES)}, found {args.sources!r}")
    summary = build(args.out, sources=sources, work=args.work, min_seconds=args.min_seconds,
                    max_seconds=args.max_seconds)
    print(f"{args.out}: {len(summary['files'])} recording(s), {summary['total_seconds']} s, from "
          + ", ".join(f"{p['package']} {p['version']}" for p in summary["packages"])
          + f"; {len(summary['left_out'])} left out (see SOURCES.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
