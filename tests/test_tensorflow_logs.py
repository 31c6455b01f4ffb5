"""The command line prints only its own output: TensorFlow's start-up lines (absl's pre-initialisation
warning, "Could not find cuda drivers", oneDNN's notice) are kept out unless -v."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_WAV = Path(__file__).resolve().parent.parent / "fixtures" / "wav" / "good_16bit_mono_22050.wav"
STARTUP = ("absl::InitializeLog", "Could not find cuda drivers", "oneDNN custom operations", "cpu_feature_guard")


@pytest.fixture
def dataset(tmp_path) -> Path:
    (tmp_path / "wavs").mkdir()
    shutil.copy(GOOD_WAV, tmp_path / "wavs" / "a.wav")
    (tmp_path / "metadata.csv").write_text("a|A tone.|A tone.\n")
    return tmp_path


def _environment() -> dict:
    """The user's environment as a shell gives it: none of perfsuite's or TensorFlow's log settings."""
    return {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PERFSUITE_TF_LOGS")}


def _perfsuite(*args) -> subprocess.CompletedProcess:
    """The installed console script, as a user runs it."""
    script = shutil.which("perfsuite") or str(Path(sys.executable).parent / "perfsuite")
    return subprocess.run([script, *map(str, args)], capture_output=True, text=True, timeout=300, check=False,
                          env=_environment())


def _messages(text: str) -> list[str]:
    """TensorFlow's log lines without their time and thread prefix ("I0000 00:00:... 123 file.cc:31] ")."""
    return [re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", line) for line in text.splitlines()]


def test_check_data_prints_only_its_findings(dataset):
    result = _perfsuite("check-data", dataset)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["checked 1 utterance(s) from wav: 0 unreadable file(s)"]
    assert result.stderr == ""


def test_machine_prints_only_its_fingerprint():
    result = _perfsuite("machine")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert not any(marker in result.stdout for marker in STARTUP)


@pytest.mark.slow  # tens of seconds (processes, an XLA compile): the unit run stays within 5 minutes
def test_verbose_shows_what_tensorflow_writes_when_imported(dataset):
    raw = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, timeout=300,
                         check=False, env=_environment())
    expected = [line for line in _messages(raw.stderr) if any(marker in line for marker in STARTUP)]
    result = _perfsuite("check-data", dataset, "-v")
    assert result.returncode == 0, result.stderr
    shown = _messages(result.stderr)
    assert all(line in shown for line in expected), (expected, shown)
    assert result.stdout.splitlines() == ["checked 1 utterance(s) from wav: 0 unreadable file(s)"]


@pytest.mark.parametrize("flags", [("-v", "check-data", "d"), ("check-data", "d", "-v"), ("check-data", "d")])
def test_verbose_is_read_before_or_after_the_command(flags):
    from perfsuite.tools import cli

    assert getattr(cli._parser().parse_args(flags), "verbose", False) == ("-v" in flags)


def test_telling_a_dataset_from_a_python_iterable_imports_no_tensorflow():
    probe = ("import sys; from perfsuite._tensorflow import is_dataset; "
             "assert not is_dataset(iter(range(3))); assert 'tensorflow' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    from perfsuite._tensorflow import is_dataset, tensorflow

    tf = tensorflow()
    assert is_dataset(tf.data.Dataset.range(3)) and not is_dataset([0, 1, 2])


def test_numpy_batches_are_counted_and_read_back_without_importing_tensorflow():
    probe = ("import sys, numpy as np; from perfsuite.measure.timing import host_readback, leading_dim; "
             "batch = {'b': np.zeros((3, 2)), 'a': [np.ones(5), 'id']}; "
             "assert leading_dim(batch) == 5 and host_readback(batch) == 2; "
             "assert 'tensorflow' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
