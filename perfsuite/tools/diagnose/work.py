"""diagnose's work: the work fingerprints of the user's pipeline and step (measure/work.py, the same on every
machine) set against this run's rates: the float ops per second each achieved, as a share of this machine's
measured matmul peak (measure/peak.py). A share near 1 says only less work makes it faster; a small share
says time goes elsewhere (waiting, Python, memory, small kernels)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfsuite.measure.peak import PeakRate, measure_peak
from perfsuite.measure.work import WorkFingerprint, WorkUnavailable, dataset_work, step_work
from perfsuite.records import Record
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, format_figure


@dataclass(frozen=True)
class WorkFigures(Record):
    """The fingerprints (None where unreadable: `unavailable` says why), this machine's peak, and the
    achieved rates and work per audio second (None where the run measured no figure to set them against)."""

    pipeline: WorkFingerprint | None
    step: WorkFingerprint | None
    unavailable: tuple[str, ...] = ()
    peak: PeakRate | None = None
    pipeline_float_ops_per_s: float | None = None
    pipeline_float_ops_per_audio_s: float | None = None
    step_float_ops_per_s: float | None = None


def read_work(dataset, step, batch, *, pipeline_name: str, step_name: str | None) -> WorkFigures:
    """Fingerprint the pipeline (a tf.data.Dataset or a Pipeline already read), and the step at `batch`
    (traced, not run); nothing timed."""
    unavailable = []
    pipeline = _read(lambda: dataset_work(dataset, name=pipeline_name), unavailable)
    fingerprint = None if step is None else _read(lambda: step_work(step, batch, name=step_name or "step"),
                                                  unavailable)
    return WorkFigures(pipeline=pipeline, step=fingerprint, unavailable=tuple(unavailable))


def with_rates(work: WorkFigures, *, audio_s_per_sample: float | None, samples_per_s: float | None,
               step_s: float | None) -> WorkFigures:
    """The work set against the run's figures: samples_per_s, the pipeline's steady median; audio_s_per_sample,
    its audio seconds per sample; step_s, the step's steady seconds per call. The peak is timed only when
    there is a rate to set against it."""
    per_sample = None if work.pipeline is None else work.pipeline.work.get("float_ops_per_sample")
    per_step = None if work.step is None else work.step.work.get("float_ops_per_step")
    pipeline_rate = per_sample * samples_per_s if per_sample and samples_per_s else None
    step_rate = per_step / step_s if per_step and step_s else None
    return replace(work, pipeline_float_ops_per_s=pipeline_rate, step_float_ops_per_s=step_rate,
                   pipeline_float_ops_per_audio_s=per_sample / audio_s_per_sample if per_sample and audio_s_per_sample
                   else None, peak=measure_peak() if pipeline_rate or step_rate else None)


def measure_work(dataset, step, batch, *, pipeline_name: str, step_name: str | None,
                 audio_s_per_sample: float | None, samples_per_s: float | None,
                 step_s: float | None) -> WorkFigures:
    """read_work, then with_rates."""
    return with_rates(read_work(dataset, step, batch, pipeline_name=pipeline_name, step_name=step_name),
                      audio_s_per_sample=audio_s_per_sample, samples_per_s=samples_per_s, step_s=step_s)


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
    for label, fingerprint, rate, per_audio_s in (
            ("pipeline", figures.pipeline, figures.pipeline_float_ops_per_s, figures.pipeline_float_ops_per_audio_s),
            ("step", figures.step, figures.step_float_ops_per_s, None)):
        if fingerprint is None:
            continue
        words = ", ".join(f"{format_figure(value)} {key.replace('_', ' ')}" for key, value in fingerprint.work.items()
                          if key.startswith("float_ops"))
        python = fingerprint.work.get("python_work_per_sample")
        if python:
            words += f", {format_figure(python)} array elements through library calls per sample in Python bodies"
        evidence = dict(fingerprint.work)
        if per_audio_s is not None:
            evidence["float_ops_per_audio_s"] = per_audio_s
            words += f", {format_figure(per_audio_s)} float ops per audio s (measured audio)"
        finding = f"the {label}'s work: {words} (counted as {fingerprint.method.split('(')[0].strip()})"
        unresolved = fingerprint.structure.get("unresolved_float_ops") or {}
        if unresolved:
            evidence["unresolved_float_ops"] = sum(unresolved.values())
            finding += ("; not counted, so the figure is a lower bound: "
                        + ", ".join(f"{count} {op}" for op, count in sorted(unresolved.items())))
        if rate is not None and figures.peak is not None:
            share = figures.peak.share(rate)
            evidence.update(achieved_float_ops_per_s=rate, peak_float_ops_per_s=figures.peak.float_ops_per_s)
            finding += (f"; it runs at {format_figure(rate)} float ops/s, {share:.1%} of this machine's measured "
                        f"peak ({format_figure(figures.peak.float_ops_per_s)}/s, {figures.peak.kernel})")
            if share > 1:
                finding += ": faster than that reference, which is what this machine reached on it, not a bound"
        found.append(DiagnosisFinding("work", finding, evidence, None))
    return found
