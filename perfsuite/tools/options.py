"""Checks of the command line's output options, shared by the commands that write files."""

from __future__ import annotations


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
