"""diagnose's work: the work fingerprints of the user's pipeline and step (measure/work.py: float ops, op
histogram, structure; the same on every machine), set against what this run measured: the pipeline's
achieved float-op rate (float ops per sample x its steady samples/s) and the step's (float ops per step
over its steady seconds), each as a share of this machine's measured matmul peak (measure/peak.py). A
share near 1 says the code runs near what this machine does best, so only less work makes it faster;
a small share says time goes elsewhere (waiting, Python, memory, small kernels)."""

from __future__ import annotations

from dataclasses import dataclass

from perfsuite.measure.peak import PeakRate, measure_peak
from perfsuite.measure.work import WorkFingerprint, WorkUnavailable, dataset_work, step_work
from perfsuite.records import Record
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, format_figure


@dataclass(frozen=True)
class WorkFigures(Record):
    """The fingerprints (None where unreadable: `unavailable` says why), this machine's peak, and the
    achieved rates (None where the run measured no rate to set the work against)."""

    pipeline: WorkFingerprint | None
    step: WorkFingerprint | None
    peak: PeakRate | None
    pipeline_float_ops_per_s: float | None
    step_float_ops_per_s: float | None
    unavailable: tuple[str, ...] = ()


def measure_work(dataset, step, batch, *, pipeline_name: str, step_name: str | None,
                 audio_s_per_sample: float | None, samples_per_s: float | None,
                 step_s: float | None) -> WorkFigures:
    """Fingerprint the pipeline (and the step at `batch`), time the peak, and derive the achieved rates.
    samples_per_s: the pipeline's steady median; step_s: the step's steady seconds per call."""
    unavailable = []
    pipeline = _read(lambda: dataset_work(dataset, name=pipeline_name, audio_seconds=audio_s_per_sample or None),
                     unavailable)
    fingerprint = None if step is None else _read(lambda: step_work(step, batch, name=step_name or "step"),
                                                  unavailable)
    pipeline_rate = step_rate = None
    if pipeline is not None and samples_per_s and pipeline.work.get("float_ops_per_sample"):
        pipeline_rate = pipeline.work["float_ops_per_sample"] * samples_per_s
    if fingerprint is not None and step_s and fingerprint.work.get("float_ops_per_step"):
        step_rate = fingerprint.work["float_ops_per_step"] / step_s
    peak = measure_peak() if pipeline_rate or step_rate else None
    return WorkFigures(pipeline=pipeline, step=fingerprint, peak=peak, pipeline_float_ops_per_s=pipeline_rate,
                       step_float_ops_per_s=step_rate, unavailable=tuple(unavailable))


def _read(fingerprint, unavailable: list) -> WorkFingerprint | None:
    try:
        return fingerprint()
    except WorkUnavailable as error:
        unavailable.append(str(error))
        return None


def work_verdicts(figures: WorkFigures | None) -> list[DiagnosisFinding]:
    """The work per sample and per audio second, the achieved rate against the peak; what could not be read."""
    if figures is None:
        return []
    found = [DiagnosisFinding("work", f"not read: {why}", {}, None) for why in figures.unavailable]
    for label, fingerprint, rate in (("pipeline", figures.pipeline, figures.pipeline_float_ops_per_s),
                                ("step", figures.step, figures.step_float_ops_per_s)):
        if fingerprint is None:
            continue
        words = ", ".join(f"{format_figure(value)} {key.replace('_', ' ')}" for key, value in fingerprint.work.items()
                          if key.startswith("float_ops"))
        evidence = dict(fingerprint.work)
        finding = f"the {label}'s work: {words} (float ops: {fingerprint.method.split('(')[0].strip()})"
        if rate is not None and figures.peak is not None:
            share = figures.peak.share(rate)
            evidence.update(achieved_float_ops_per_s=rate, peak_float_ops_per_s=figures.peak.float_ops_per_s)
            finding += (f"; it runs at {format_figure(rate)} float ops/s, {share:.1%} of this machine's measured "
                        f"peak ({format_figure(figures.peak.float_ops_per_s)}/s, {figures.peak.kernel})")
        found.append(DiagnosisFinding("work", finding, evidence, None))
    return found
