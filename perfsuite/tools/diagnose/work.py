"""diagnose's work: the work fingerprints of the pipeline and step (measure/work.py) against this run's rates,
as a share of the matmul peak (measure/peak.py): near 1, only less work helps; small, time goes elsewhere."""

from __future__ import annotations

from dataclasses import replace

from perfsuite.measure.peak import measure_peak
from perfsuite.measure.work import WorkFingerprint, WorkUnavailable, dataset_work, step_work
from perfsuite.verdict.diagnosis_figures import WorkFigures


def read_work(dataset, step, batch, *, pipeline_name: str, step_name: str | None) -> WorkFigures:
    """Fingerprint the pipeline (or a Pipeline already read) and the step at `batch` (traced, not run)."""
    unavailable = []
    pipeline = _read(lambda: dataset_work(dataset, name=pipeline_name), unavailable)
    fingerprint = None if step is None else _read(lambda: step_work(step, batch, name=step_name or "step"),
                                                  unavailable)
    return WorkFigures(pipeline=pipeline, step=fingerprint, unavailable=tuple(unavailable))


def with_rates(work: WorkFigures, *, audio_s_per_sample: float | None, samples_per_s: float | None,
               step_s: float | None) -> WorkFigures:
    """The work against samples_per_s (the pipeline's steady median), its audio_s_per_sample and step_s (the
    step's steady seconds per call); the peak is timed only when there is a rate to set against it."""
    per_sample = None if work.pipeline is None else work.pipeline.work.get("float_ops_per_sample")
    per_step = None if work.step is None else work.step.work.get("float_ops_per_step")
    pipeline_rate = per_sample * samples_per_s if per_sample and samples_per_s else None
    step_rate = per_step / step_s if per_step and step_s else None
    return replace(work, pipeline_float_ops_per_s=pipeline_rate, step_float_ops_per_s=step_rate,
                   pipeline_float_ops_per_audio_s=per_sample / audio_s_per_sample if per_sample and audio_s_per_sample
                   else None, peak=measure_peak() if pipeline_rate or step_rate else None)


def _read(fingerprint, unavailable: list) -> WorkFingerprint | None:
    try:
        return fingerprint()
    except WorkUnavailable as error:
        unavailable.append(str(error))
        return None
