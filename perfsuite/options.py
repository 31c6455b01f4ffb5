"""argparse types of perfsuite's options, declared once and shared by the pytest options (`--perfsuite-*`,
pytest_plugin/plugin.py) and the command line (tools/cli.py, tools/ab/). Each parses one value or raises
argparse.ArgumentTypeError saying what it expected and what it found; argparse names the option.
check_outputs() checks the output paths of the commands that write files, before they measure."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable


def fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a share, a false-alarm rate, a margin)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, found {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, found {text!r}")
    return value


def integer(minimum: int, *, autotune: bool = False) -> Callable[[str], int]:
    """An integer >= minimum, or -1 (tf.data.AUTOTUNE) when autotune."""
    expected = f"an integer >= {minimum}" + (" or -1 (AUTOTUNE)" if autotune else "")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not (value >= minimum or (autotune and value == -1)):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}")
        return value

    return parse


BATCH_SPEC_KEYS = ("mel", "mel_len")
_COMPONENT_PATH = re.compile(r"^[^/\s,=]+(/[^/\s,=]+)*$")


def batch_spec_entries(text: str) -> dict[str, str]:
    """'mel=PATH[,mel_len=PATH]' as {key: path}, PATH tuple indices or dict keys joined by '/' (e.g.
    mel=1,mel_len=3 or mel=features/mel); ValueError says what was expected and what was found."""
    entries: dict[str, str] = {}
    for part in text.split(","):
        key, equals, value = (piece.strip() for piece in part.partition("="))
        if not equals or key not in BATCH_SPEC_KEYS or not _COMPONENT_PATH.match(value):
            raise ValueError(f"expected mel=PATH[,mel_len=PATH] (PATH: tuple indices or dict keys joined by '/', "
                             f"e.g. mel=1,mel_len=3 or mel=features/mel), found {part!r}")
        if key in entries:
            raise ValueError(f"expected {key} once, found it twice in {text!r}")
        entries[key] = value
    if entries.get("mel") is not None and entries.get("mel") == entries.get("mel_len"):
        raise ValueError(f"expected mel and mel_len to name two components, found both {entries['mel']!r}")
    return entries


def batch_spec(text: str) -> dict[str, str]:
    """--batch-spec: batch_spec_entries as an argparse type."""
    try:
        return batch_spec_entries(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def frame_hop(text: str) -> float:
    """Seconds of audio per frame: a number of seconds, or HOP/RATE (hop in samples over the sample rate)."""
    hop, slash, rate = text.partition("/")
    try:
        value = float(hop) / float(rate) if slash else float(text)
    except (ValueError, ZeroDivisionError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected seconds per frame > 0, or HOP/RATE such as 256/22050, found {text!r}")
    return value


def named(option: str, parse: Callable[[str], object]) -> Callable[[str], object]:
    """parse with the option's name in its message (pytest's option errors do not name the option)."""

    def named_parse(text: str):
        try:
            return parse(text)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"{option}: {error}") from None

    return named_parse


def check_outputs(parser, *, json_file, directories: dict) -> None:
    """Output paths usable before minutes of measuring, not after: each of ``directories`` (option:
    path) a directory or a path to create one, ``json_file`` not a directory, and matplotlib there
    when ``--report`` is asked for. Problems are usage errors (exit 2) naming the option."""
    for option, directory in directories.items():
        if directory is not None and directory.exists() and not directory.is_dir():
            parser.error(f"{option}: expected a directory (or a path to create one), found a file")
    if json_file is not None and json_file.is_dir():
        parser.error("--json: expected a file path, found a directory")
    if directories.get("--report") is not None:
        from perfsuite.plotting import require_matplotlib

        require_matplotlib("--report")
