"""Reports: the benchmark-run report (perfsuite.pytest_plugin.report) on hand-made records, the shared
matplotlib helpers (perfsuite.plotting), and the imports that keep both below the layers that use them.

The diagnosis report is tested in test_diagnose.py, on a real diagnosis.
"""

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from perfsuite import plotting
from perfsuite.errors import PerfsuiteError, ReportUnavailable
from perfsuite.pytest_plugin.report import BenchmarkRecord, GateMark, TimelineFigures, write_benchmark_report

PACKAGE = Path(plotting.__file__).resolve().parent
PNG = b"\x89PNG\r\n\x1a\n"


def _measurement(batches: int, *, cycle: int | None = None) -> TimelineFigures:
    return TimelineFigures(batch_s=tuple(0.01 + 0.001 * (i % 4) for i in range(batches)), samples_per_s=1600.0,
                           batch_median_s=0.011, variation_ratio=0.05, cycle_period=cycle)


RECORDS = [
    BenchmarkRecord(benchmark_id="benchmarks/test_loader.py::test_loader[tf_native-wav]", nodeid="n1",
                    outcome="passed", metrics={"samples_per_s": 1600.0, "variation_ratio": 0.05},
                    measurement=_measurement(32, cycle=4), round_lengths=(16, 16)),
    BenchmarkRecord(benchmark_id="benchmarks/test_loader.py::test_ratio", nodeid="n2", outcome="failed",
                    metrics={"tf_native_over_numpy_function_ratio": 2.5},
                    gates=(GateMark("tf_native_over_numpy_function_ratio", "min", 3.0, "fail"),),
                    ratio_rounds={"tf_native_over_numpy_function_ratio": (2.4, 2.5, 2.7)}),
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
    assert "| tf_native_over_numpy_function_ratio | 2.5 | 2.4–2.7 | ≥ 3: fail |" in squeezed
    assert "| benchmarks/test_loader.py::test_loader[tf_native-wav] | passed | 1600 | 0.011 | 0.05 | every 4 |" in squeezed


def test_a_benchmark_record_travels_as_json_and_is_read_back_typed_or_refused_by_name():
    record = RECORDS[1]
    assert BenchmarkRecord.from_dict(json.loads(json.dumps(record.as_dict()))) == record
    damaged = {**record.as_dict(), "gates": [{"metric": "x", "kind": "min", "threshold": "high", "decision": "fail"}]}
    with pytest.raises(PerfsuiteError, match=r"gates\[0\]\.threshold"):
        BenchmarkRecord.from_dict(damaged)


def test_file_stem_keeps_a_safe_name():
    assert plotting.file_stem("test_loader[tf_native-wav-bs16]") == "test_loader-tf_native-wav-bs16"
    assert len(plotting.file_stem("x" * 500)) == 120


def test_missing_matplotlib_names_the_option_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(ReportUnavailable, match=r"--report needs matplotlib.*perfsuite\[report\]") as raised:
        plotting.require_matplotlib("--report")
    assert isinstance(raised.value, PerfsuiteError)


DIAGNOSIS = Path(__file__).parent / "data" / "diagnose_schema6.json"


def test_the_diagnosis_summary_s_tables_go_through_perfsuite_tables_and_escape_pipes():
    from perfsuite.tools.report import markdown_summary
    from perfsuite.verdict.diagnosis_record import Diagnosis

    diagnosis = Diagnosis.from_dict(json.loads(DIAGNOSIS.read_text()))
    first = dataclasses.replace(diagnosis.stages[0], plan="a | b")  # a cell with a pipe
    summary = markdown_summary(dataclasses.replace(diagnosis, stages=(first, *diagnosis.stages[1:])), [])
    squeezed = re.sub(r" +", " ", summary)
    assert "| stage | status | share s | spent s | rounds | plan |" in squeezed
    assert "a \\| b" in summary
    tables = _tables(summary)
    assert len(tables) >= 4  # stages, loaders, compared, input-bound, ...
    for table in tables:  # every row has its header's cells: no cell split by an unescaped '|'
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in table}
        assert len(widths) == 1, table


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of a text: runs of lines starting with '|'."""
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables
