"""The user's tf.data graph as diagnose reports it, asked of the pipeline model (workload/pipeline_model.py,
which reads the graph once): its stages, Python functions and dynamic shapes, and the findings they give. The
rules (the last real stage, prefetch_to_device last, ...): docs/diagnose.md, "The graph read as it runs"."""

from __future__ import annotations

from dataclasses import dataclass

from perfsuite.measure.batch_spec import leaves
from perfsuite.measure.speech import PaddingFigures
from perfsuite.records import Record
from perfsuite.verdict.diagnosis_figures import DiagnosisFinding, RoundsEstimate
from perfsuite.verdict.pipeline_findings import (
    cache_after_repeat_finding,
    fixed_padding_finding,
    graph_finding,
    prefetch_to_device_finding,
    sequential_map_finding,
    sequential_read_finding,
)
from perfsuite.workload.pipeline_model import AUTOTUNE, Pipeline, PythonOp, read_pipeline, shape_words
from perfsuite.workload.pipeline_model import Stage as GraphStage

__all__ = ["AUTOTUNE", "DynamicShape", "GraphFindings", "GraphStage", "PythonOp", "dynamic_shapes",
           "graph_findings", "inspect_graph"]


@dataclass(frozen=True)
class DynamicShape(Record):
    """An element component whose static shape leaves dimensions open: its path in element_spec ('' for
    a single tensor), its shape in words, and the open dimensions (None: not even the rank is known)."""

    component: str
    shape: str
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class GraphFindings(Record):
    """What the dataset's graph shows, its stages from the source to the output (along first inputs)."""

    transformations: tuple[str, ...]  # the stages' dataset op types
    python_ops: tuple[PythonOp, ...]
    ends_with_prefetch: bool  # the last real stage prefetches
    inject_prefetch: bool  # tf.data adds a prefetch at run time after a synchronous last stage (default on)
    dynamic_shapes: tuple[DynamicShape, ...]  # element components with open dimensions: a step may retrace
    element_spec: str
    stages: tuple[GraphStage, ...] = ()
    last_stage: str | None = None  # the op of the last real stage (wrappers and pass-through stages skipped)
    after_prefetch_to_device: tuple[str, ...] = ()  # real stages after it (TensorFlow requires it last)
    read_from: str = "serialized graph"  # or the walk that read a dataset TensorFlow would not serialize
    sequential_reads: tuple[str, ...] = ()  # interleaves / flat_maps reading files one at a time, in words
    caches_after_endless_repeat: tuple[str, ...] = ()  # cache stages after an endless repeat, in words
    buckets: bool = False  # the pipeline already batches by length (group_by_window)

    def chain_words(self) -> str:
        """The stages as they run, wrappers named apart: 'range -> map (AUTOTUNE parallel) -> ...'."""
        real = [stage.words() for stage in self.stages if stage.kind != "wrapper"]
        wrappers = sorted({stage.method for stage in self.stages if stage.kind == "wrapper"})
        return " -> ".join(real) + (f" (wrappers skipped: {', '.join(wrappers)})" if wrappers else "")

    def sequential_maps(self) -> tuple[GraphStage, ...]:
        return tuple(s for s in self.stages if s.family == "map" and s.parallelism == 1)

    def fixed_padding(self) -> tuple[GraphStage, ...]:
        """padded_batch stages that pad a component of rank >= 2 to a fixed length on its first axis."""
        return tuple(s for s in self.stages if s.padded_shapes
                     and any(len(shape) >= 2 and shape[0] > 0 for shape in s.padded_shapes))


def inspect_graph(dataset) -> GraphFindings:
    """The GraphFindings of a tf.data.Dataset or of a Pipeline already read, asked of its model."""
    pipeline = dataset if isinstance(dataset, Pipeline) else read_pipeline(dataset)
    model = pipeline.model
    stages = model.chain()
    last = model.last_real_stage()
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


def dynamic_shapes(element_spec) -> tuple[DynamicShape, ...]:
    """Components of element_spec whose static shape has open dimensions (or an unknown rank)."""
    out = []
    for path, spec in leaves(element_spec):
        shape = getattr(spec, "shape", None)
        if shape is not None and shape.rank is None:
            out.append(DynamicShape(component=path, shape="<unknown rank>", dims=None))
        elif shape is not None and None in shape.as_list():
            dims = tuple(i for i, dim in enumerate(shape.as_list()) if dim is None)
            out.append(DynamicShape(component=path, shape=str(tuple(shape.as_list())), dims=dims))
    return tuple(out)


def graph_findings(graph: GraphFindings, *, padding: PaddingFigures | None, not_measured: str | None = None,
                   waits: bool | None = None, why_not: str = "", share: RoundsEstimate | None = None,
                   ) -> list[DiagnosisFinding]:
    """The graph's findings (verdict/pipeline_findings.py words them); waits, why_not and share as
    when_waiting takes them, not_measured as fixed_padding_finding takes it."""
    fixed = tuple(f"{s.method} {s.node} ({', '.join(shape_words(p) for p in s.padded_shapes)})"
                  for s in graph.fixed_padding())
    found = [graph_finding(graph.chain_words(), graph.last_stage, graph.read_from),
             prefetch_to_device_finding(graph.after_prefetch_to_device),
             sequential_map_finding(tuple(s.node for s in graph.sequential_maps()), waits, why_not, share),
             sequential_read_finding(graph.sequential_reads, waits, why_not, share),
             cache_after_repeat_finding(graph.caches_after_endless_repeat),
             fixed_padding_finding(padding, fixed, not_measured, buckets=graph.buckets)]
    return [finding for finding in found if finding is not None]
