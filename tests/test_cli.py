"""`perfsuite check-data`: lists exactly the files the TF-native loaders cannot read; exit codes 0/1/2."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfsuite.data.corpus import cache_paths, read_metadata
from perfsuite.tools import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wav"
UNREADABLE = sorted(p.stem for p in FIXTURES.glob("*.wav") if not p.stem.startswith("good_"))
READABLE = sorted(p.stem for p in FIXTURES.glob("good_*.wav"))


def run(capfd, *args):
    code = cli.main(["check-data", *map(str, args)])
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def fixtures_dataset(root: Path) -> Path:
    """fixtures/wav in LJSpeech layout: every file an utterance, plus one listed but missing."""
    shutil.copytree(FIXTURES, root / "wavs", ignore=shutil.ignore_patterns("*.md"))
    names = [*UNREADABLE, *READABLE, "missing_file"]
    (root / "metadata.csv").write_text("".join(f"{name}|A tone.|A tone.\n" for name in names))
    return root


def listed_paths(out: str) -> list[str]:
    """The file named on each problem line ("<path>: expected ..., found ...")."""
    return [line.split(": expected ")[0] for line in out.splitlines() if ": expected " in line]


def test_good_corpus_passes_and_lists_nothing(capfd, tiny_corpus, tiny_cache):
    code, out, _ = run(capfd, tiny_corpus)
    assert code == 0
    count = len(read_metadata(tiny_corpus))
    assert out.splitlines() == [f"checked {count} utterance(s) from wav and cache: 0 unreadable file(s)"]


def test_real_world_wav_variants_are_named_with_reasons_and_readable_ones_are_not(capfd, tmp_path):
    dataset = fixtures_dataset(tmp_path)
    code, out, _ = run(capfd, dataset)
    assert code == 1
    expected = [str(dataset / "wavs" / f"{name}.wav") for name in [*UNREADABLE, "missing_file"]]
    assert sorted(listed_paths(out)) == sorted(expected)
    for line in out.splitlines()[:-1]:
        assert ": expected " in line and ", found " in line  # each with its reason
    for name in READABLE:
        assert f"{name}.wav" not in out
    assert out.splitlines()[-1] == (f"checked {len(UNREADABLE) + len(READABLE) + 1} utterance(s) from wav: "
                                    f"{len(UNREADABLE) + 1} unreadable file(s)")
    reasons = dict(line.split(": expected ", 1) for line in out.splitlines()[:-1])
    assert "24-bit PCM" in reasons[str(dataset / "wavs" / "pcm24.wav")]
    assert "16000 Hz" in reasons[str(dataset / "wavs" / "rate_16000.wav")]
    assert "no such file" in reasons[str(dataset / "wavs" / "missing_file.wav")]


def test_console_script_is_installed_and_reports(tmp_path):
    """The installed script runs the CLI (a check-data run through it: test_tensorflow_logs.py)."""
    script = shutil.which("perfsuite") or str(Path(sys.executable).parent / "perfsuite")
    assert Path(script).exists(), "the perfsuite console script is not installed (pip install -e .)"
    usage = subprocess.run([script, "check-data", str(tmp_path / "nowhere")], capture_output=True, text=True,
                           timeout=60, check=False)
    assert usage.returncode == 2 and "PATH: expected a dataset directory, found nothing at that path" in usage.stderr
    assert "Traceback" not in usage.stderr


def test_corrupted_cache_file_is_named(capfd, tmp_path, tiny_corpus, tiny_cache):
    dataset = tmp_path / "data"
    shutil.copytree(tiny_corpus, dataset)
    first, second = (u.id for u in read_metadata(dataset)[:2])
    cache = tiny_cache.relative_to(tiny_corpus)
    mel_path = cache_paths(dataset / cache, first)[0]
    np.save(mel_path, np.asfortranarray(np.load(mel_path)))  # Fortran order: TF-native cannot read it
    tokens_path = cache_paths(dataset / cache, second)[1]
    tokens_path.write_bytes(tokens_path.read_bytes()[:-3])
    code, out, _ = run(capfd, dataset)
    assert code == 1
    assert sorted(listed_paths(out)) == sorted([str(mel_path), str(tokens_path)])
    assert "fortran_order True" in out
    assert out.splitlines()[-1].endswith("from wav and cache: 2 unreadable file(s)")


def test_explicit_cache_directory(capfd, tmp_path, tiny_corpus, tiny_cache):
    cache = tmp_path / "cache"
    shutil.copytree(tiny_cache, cache)
    victim = cache_paths(cache, read_metadata(tiny_corpus)[3].id)[0]
    victim.unlink()
    code, out, _ = run(capfd, tiny_corpus, "--cache", cache)
    assert code == 1 and listed_paths(out) == [str(victim)]


@pytest.mark.parametrize("what", ["nothing", "file"])
def test_path_that_is_not_a_directory_is_a_usage_error(capfd, tmp_path, what):
    path = tmp_path / "target"
    if what == "file":
        path.write_text("x")
    code, out, err = run(capfd, path)
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"perfsuite: error: PATH: expected a dataset directory, found {'a file' if what == 'file' else 'nothing at that path'}")


@pytest.mark.parametrize("args", [["--cache", "/nonexistent/cache"], ["--sample-rate", "0"], ["--sample-rate", "x"],
                                  ["--sample-rate", "8000"]])
def test_bad_options_are_usage_errors_naming_the_option(capfd, tiny_corpus, args):
    code, out, err = run(capfd, tiny_corpus, *args)
    assert code == 2 and out == "" and "error:" in err and args[0] in err


@pytest.mark.parametrize("command", [[], ["check-data"], ["diagnose"], ["machine"], ["ab"], ["history"],
                                     ["selftest"]])
def test_every_help_prints_without_a_traceback(capfd, command):
    """argparse formats help strings with %: a bare '%' in one made `perfsuite --help` a traceback."""
    assert cli.main([*command, "--help"]) == 0
    assert "usage: perfsuite" in capfd.readouterr().out


def test_missing_subcommand_is_a_usage_error(capfd):
    assert cli.main([]) == 2
    assert "error:" in capfd.readouterr().err


def test_missing_metadata_is_a_one_line_error(capfd, tmp_path):
    (tmp_path / "wavs").mkdir()
    code, out, err = run(capfd, tmp_path)
    assert code == 1 and out == ""
    python_lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert python_lines == [(f"error: {tmp_path / 'metadata.csv'}: expected an LJSpeech metadata.csv "
                             "(id|text|normalized_text lines), found no such file")]


def test_malformed_metadata_is_a_one_line_error_naming_the_line(capfd, tmp_path):
    (tmp_path / "metadata.csv").write_text("a|x|x\nbroken line\n")
    code, _, err = run(capfd, tmp_path)
    assert code == 1
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {tmp_path / 'metadata.csv'}:2: expected 'id|text|normalized_text', found 1 field(s): 'broken line'"]
