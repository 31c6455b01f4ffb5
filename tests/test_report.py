"""Reports: the benchmark-run report (perfsuite.pytest_plugin.report) on hand-made records, the shared
matplotlib helpers (perfsuite.plotting), and the imports that keep both below the layers that use them.

The diagnosis report is tested in test_diagnose.py, on a real diagnosis.
"""

import re
import sys
from pathlib import Path

import pytest

from perfsuite import plotting
from perfsuite.errors import PerfsuiteError, ReportUnavailable
from perfsuite.pytest_plugin.report import write_benchmark_report

PACKAGE = Path(plotting.__file__).resolve().parent
PNG = b"\x89PNG\r\n\x1a\n"


def _measurement(batches: int, *, cycle: int | None = None) -> dict:
    return {"batch_s": [0.01 + 0.001 * (i % 4) for i in range(batches)], "samples_per_s": 1600.0,
            "batch_median_s": 0.011, "variation_ratio": 0.05, "cycle_significant": cycle is not None,
            "cycle_period": cycle}


RECORDS = [
    {"benchmark_id": "benchmarks/test_loader.py::test_loader[tf_native-wav]", "outcome": "passed",
     "metrics": {"samples_per_s": 1600.0, "variation_ratio": 0.05}, "measurement": _measurement(32, cycle=4),
     "round_lengths": [16, 16]},
    {"benchmark_id": "benchmarks/test_loader.py::test_ratio", "outcome": "failed",
     "metrics": {"tf_native_over_numpy_function_ratio": 2.5}, "measurement": None,
     "ratio_rounds": {"tf_native_over_numpy_function_ratio": [2.4, 2.5, 2.7]}},
]


def test_benchmark_report_links_a_timeline_per_measurement_and_the_ratio_plot(tmp_path):
    summary_path = write_benchmark_report(RECORDS, tmp_path / "report", title="nightly")
    summary = summary_path.read_text()
    pngs = sorted(p.name for p in summary_path.parent.glob("*.png"))
    assert pngs == ["ratios.png", "timeline-00-test_loader-tf_native-wav.png"]
    for name in pngs:
        assert (summary_path.parent / name).read_bytes()[:8] == PNG and f"]({name})" in summary
    assert summary.startswith("# nightly\n")
    squeezed = re.sub(r" +", " ", summary)  # Markdown tables pad their cells
    assert "| benchmarks/test_loader.py::test_ratio | failed | - |" in squeezed  # no measurement: no figures
    assert "| tf_native_over_numpy_function_ratio | 2.5 | 2.4–2.7 |" in squeezed


def test_file_stem_keeps_a_safe_name():
    assert plotting.file_stem("test_loader[tf_native-wav-bs16]") == "test_loader-tf_native-wav-bs16"
    assert len(plotting.file_stem("x" * 500)) == 120


def test_missing_matplotlib_names_the_option_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(ReportUnavailable, match=r"--report needs matplotlib.*perfsuite\[report\]") as raised:
        plotting.require_matplotlib("--report")
    assert isinstance(raised.value, PerfsuiteError)
