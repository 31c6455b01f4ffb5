"""argparse types of perfsuite's options, declared once and shared by the pytest options (`--perfsuite-*`,
pytest_plugin/plugin.py) and the command line (tools/cli.py, tools/ab/). Each parses one value or raises
argparse.ArgumentTypeError saying what it expected and what it found; argparse names the option.
check_outputs() checks the output paths of the commands that write files, before they measure."""

from __future__ import annotations

import argparse
import math
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
