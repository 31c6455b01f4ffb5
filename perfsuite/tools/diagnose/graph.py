"""The user's tf.data graph as diagnose reads it (rules: docs/diagnose.md, "The graph read as it runs")."""

from __future__ import annotations

from perfsuite.verdict.pipeline_figures import GraphFindings, dynamic_shapes
from perfsuite.workload.pipeline_model import AUTOTUNE, read_pipeline
from perfsuite.workload.pipeline_model import Stage as GraphStage

__all__ = ["AUTOTUNE", "GraphStage", "inspect_graph"]


def inspect_graph(dataset) -> GraphFindings:
    """The GraphFindings of a tf.data.Dataset or of a Pipeline already read, asked of its model."""
    pipeline = read_pipeline(dataset)
    model, last = pipeline.model, pipeline.model.last_real_stage()
    stages = model.chain()
    return GraphFindings(transformations=tuple(s.op for s in stages), python_ops=model.python_ops,
                         ends_with_prefetch=last is not None and last.family == "prefetch",
                         inject_prefetch=model.inject_prefetch,
                         dynamic_shapes=dynamic_shapes(pipeline.dataset.element_spec),
                         element_spec=model.element_spec, stages=stages,
                         last_stage=None if last is None else last.op,
                         after_prefetch_to_device=_after_copy_to_device(stages), read_from=model.read_from,
                         sequential_reads=tuple(f"{stage.words()} {stage.node} (reads with {', '.join(reads)})"
                                                for stage, reads in model.sequential_reads()),
                         caches_after_endless_repeat=tuple(f"{s.words()} {s.node}"
                                                           for s in model.caches_after_endless_repeat()),
                         buckets=model.buckets())


def _after_copy_to_device(stages: tuple[GraphStage, ...]) -> tuple[str, ...]:
    """The real stages after the last copy_to_device, its own prefetch (prefetch_to_device's second
    half) left out."""
    positions = [i for i, s in enumerate(stages) if s.family == "copy"]
    if not positions:
        return ()
    after = [s for s in stages[positions[-1] + 1:] if s.kind != "wrapper"]
    if after and after[0].family == "prefetch":
        after = after[1:]
    return tuple(s.method for s in after)
