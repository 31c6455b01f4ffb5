"""scripts/measure_gate_reach.py plants its slowdowns by editing perfsuite/data/loaders.py: every plant
must still find its anchor there and leave valid Python, or the script measures nothing planted."""

import argparse
import ast
import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("measure_gate_reach", ROOT / "scripts" / "measure_gate_reach.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("plant", ["mel", "copies"])
@pytest.mark.parametrize("source", ["wav", "cache"])
def test_every_plant_lands_in_the_tf_native_loader_as_valid_python(tmp_path, plant, source):
    script = _script()
    loaders = tmp_path / script.LOADERS
    loaders.parent.mkdir(parents=True)
    shutil.copy(ROOT / script.LOADERS, loaders)
    script._plant(tmp_path, source, plant, 2.5)
    planted = loaders.read_text()
    ast.parse(planted)
    guard = f"if config.kind == 'tf_native' and config.source == {source!r}:"
    assert planted.count(guard) == 1
    after_anchor = planted.split(script.ANCHOR)[1]
    assert after_anchor.lstrip().startswith(guard) and "2.5" in after_anchor.split("tf.ensure_shape")[0]


def test_amounts_are_positive_numbers():
    script = _script()
    assert script._amounts("0.5,2,60") == [0.5, 2.0, 60.0]
    for bad in ("0", "-1", "abc", "1,,2", "2000"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected positive amounts"):
            script._amounts(bad)
