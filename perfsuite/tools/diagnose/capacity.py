"""The capacity stage of a diagnosis: each stage's cost in core-seconds per element, measured on the user's
own pipeline through the prefixes the bottleneck stage cuts (rewrite.prefixes), the model of the pipeline on K cores
built on them (verdict/capacity.py), its two-core prediction checked against the pipeline as written, what AUTOTUNE
chose, and the model's split as a fix (split_fix, measured by the fixes stage like the others).

How a stage's cost is measured, and why so. A stage's cost is the time one core spends per element it produces.
Two readings were weighed:
- process CPU time (time.process_time / os.times over a drain of N elements of a prefix; time.thread_time sees only
  the Python thread, none of tf.data's). It counts every thread of the process: the Eigen intra-op threads' spinning
  while they wait for work (which inflates short ops' cost), perfsuite's own teardown thread, other iterators' buffers
  refilling; and it misses what holds a thread without using a core: a sleep, a file read, a wait for the GIL. A
  sequential stage's cap (one element at a time) is its thread's time, waits included, so CPU time reads it wrong.
- confinement to one core (tf.data options threading.private_threadpool_size=1, threading.max_intra_op_parallelism=1,
  autotune.cpu_budget=1), and the rates of successive prefixes: cost_i = 1/rate_i - 1/rate_(i-1) per sample. Every
  function a stage runs (maps, filters, interleave's, the Python ops inside them) and the ops' intra-op work run on
  the one thread, so the seconds per sample of a prefix are one core's time for its stages, waits included: the
  quantity the model's constraints are written in.
Confinement is used: it measures what the model needs, and its prediction is checked (below). Its known limit: work
outside tf.data's function runner (a source's iteration, a batch's copying, the thread that pulls a parallel map's
input) runs in the thread that pulls it and overlaps with the confined thread, so the prefix reads cheaper than it
is (docs/capacity.md has how much, measured). So each confined read's process CPU per wall second is taken with it, and
where it is above 1 the prefix's seconds per sample are scaled by it: its core-seconds are the thread's time, or the
cores it used where it used more than one. Below 1 (a sleep, I/O, the GIL: the thread waited) the thread's time
stands, as a sequential stage's cap needs. The reading's own cost (attribution.reading_cost, confined and scaled
alike) is taken off every prefix, as the bottleneck stage does. The same reads' process CPU seconds per sample,
differenced alike, are each stage's core-seconds: what the cores constraint takes (a stage that waits holds a
thread, and a parallel call, without a core).

Whether a stage is parallel comes from the pipeline model (num_parallel_calls: AUTOTUNE, fixed or none), corrected
by what tf.data ran (a plain map its map_parallelization optimization made a ParallelMapV2, read from AUTOTUNE's
model); sequential stages chained with no buffer or parallel stage between them share one thread.

The check. Each round reads every prefix confined, the reading's twins confined, and the whole pipeline as the user
wrote it on two cores (on a machine of exactly CHECK_CORES cores: as it is, with the prefetch tf.data injects at its end; on a larger
one: a private thread pool of 2 and intra-op parallelism 2), a fresh iterator each round drained of its buffers, so
that none refills behind the other reads, in alternating order (A B ... then ... B A), all in this one process:
what differs between processes cancels. The two-core side is read as the prefixes are (counted, one Python read per
batch), so each round's prediction is the model on that round's costs with the reading's own cost as a sequential
stage on its thread (a training loop reads so too); predicted / measured per round gives the error and its
interval. Its figure can sit below diagnose's throughput figure by what copying each batch to the host costs there.

What AUTOTUNE chose: read from tf.data's own autotuning model of the as-written iterator (its ModelProto, through the
IteratorGetModelProto op): per node, each parameter's value as the iterator used it (the shared state the op reads;
parallelism, buffer_size, cycle_length) and whether it is tunable. The profiler trace (tf.profiler.experimental,
Iterator::ParallelMapV2#parallelism=..# events in an XSpace protobuf) carries the same values per event, but only
while a trace runs and through a trace format that is not an API; the model is the autotuner's own record.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import replace

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.attribution import (
    MIN_READ_S,
    counted,
    pass_reads,
    read_rate,
    reading_cost,
)
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, more_rounds_for, status_from
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, samples_in
from perfsuite.tools.diagnose.targets import one_line_error
from perfsuite.verdict.capacity import (
    CHECK_BOUNDARIES,
    CHECK_CORES,
    AutotuneNode,
    CapacityFigures,
    CapacityStage,
    StageCost,
    ceiling,
    split,
    with_need,
    without_call_limits,
)
from perfsuite.verdict.diagnosis_figures import MIN_ROUNDS, estimate
from perfsuite.workload.op_table import SEQUENTIAL_MAP_OP
from perfsuite.workload.pipeline_model import AUTOTUNE, Pipeline, chain_stages

CONFINED = 1  # threads a prefix is confined to: one core
METHOD = ("confinement to one core (tf.data private thread pool 1, intra-op parallelism 1, autotune CPU budget 1): "
          "each prefix's seconds per sample on the one thread, times the cores it used where work outside the "
          "confinement overlapped it (process CPU per wall second above 1); each stage's cost the difference of "
          "successive prefixes', the reading's own cost taken off")
SPLIT_FIX = "capacity-split"
_AS_WRITTEN = "as_written"
_ASYNC_FAMILIES = ("prefetch", "copy")  # a buffer filled by a thread of its own: the thread before it ends there


def _batched(cuts, key) -> bool:
    """Whether a prefix's (by index) or a reading twin's ('batched', 'unbatched') elements are batches."""
    return key == "batched" or (key != "unbatched" and cuts[key].batched)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def confined(dataset, threads: int):
    """dataset with its functions run on a private thread pool of `threads`, ops inside them on at most `threads`
    intra-op threads, and AUTOTUNE's CPU budget `threads`."""
    options = tensorflow().data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = threads
    options.autotune.cpu_budget = threads
    return dataset.with_options(options)


def read_autotune(stream: Stream) -> tuple[AutotuneNode, ...]:
    """tf.data's autotuning model of the stream's iterator, its nodes from the source to the output along first
    inputs (IteratorGetModelProto); raises what TensorFlow raises where it cannot be read."""
    from tensorflow.core.framework import model_pb2
    from tensorflow.python.ops import gen_experimental_dataset_ops

    resource = stream.iterator._iterator_resource
    model = model_pb2.ModelProto.FromString(gen_experimental_dataset_ops.iterator_get_model_proto(resource).numpy())
    out, node = [], model.nodes.get(model.output) if model.nodes else None
    while node is not None:
        parameters = {p.name: p.state_value if (p.tunable or p.state_value) else p.value for p in node.parameters}
        out.append(AutotuneNode(name=node.name, autotune=node.autotune, parameters=parameters,
                                tunable=tuple(p.name for p in node.parameters if p.tunable)))
        node = model.nodes.get(node.inputs[0]) if node.inputs else None
    return tuple(reversed(out))


def _key(op: str) -> str:
    """A dataset op as tf.data's iterator names it, version aside: ParallelMapDatasetV2 -> ParallelMap."""
    name = op.replace("Dataset", "")
    return name.rstrip("0123456789").removesuffix("V") if name[-1:].isdigit() else name


def match_autotune(nodes: tuple[AutotuneNode, ...], chain) -> dict[str, int]:
    """{model stage node: index of its tf.data node}, in order along the chain: a node matches a stage whose op it
    names or ends with (ParallelMap for a Map tf.data made parallel, ForeverRepeat for Repeat, MemoryCache for Cache),
    a node tf.data fused from several ('MapAndBatch') each of them; stages tf.data dropped match none."""
    found, position = {}, 0
    for stage in chain:
        key = _key(stage.op)
        for index in range(position, len(nodes)):
            parts = _key(nodes[index].name + "Dataset").split("And")
            if any(part == key or part.endswith(key) or (len(parts) > 1 and key.endswith(part)) for part in parts):
                found[stage.node], position = index, index + (len(parts) == 1)
                break
    return found


class CapacityRounds:
    """The capacity stage, resumable: every prefix confined to one core and the pipeline as written on two cores, in
    interleaved rounds (module docstring) until the check's interval leaves its margin's boundaries out, or the share
    is spent. run() again adds rounds to the earlier ones (fresh iterators)."""

    def __init__(self, pipeline: Pipeline, spec: str, *, warmup: int, target_cores: int | None = None):
        self.pipeline, self.spec, self.warmup, self.target_cores = pipeline, spec, warmup, target_cores
        self.cuts = rewrite.prefixes(pipeline)
        self.cores = usable_cores()
        self.values: dict = {("one", index): [] for index in range(len(self.cuts))}
        self.cpu: dict = {}  # per confined key, per round: process CPU s per wall s of its read ...
        self.cpu2: list[float] = []  # ... and of the two-core side's
        self.autotune: tuple[AutotuneNode, ...] = ()
        self.autotune_source = "not read: no round of the pipeline as written ran"
        self.two = "as written" if self.cores == CHECK_CORES else (
            f"{CHECK_CORES} threads (private thread pool {CHECK_CORES}, intra-op parallelism {CHECK_CORES}) standing "
            f"in for {CHECK_CORES} cores on this {self.cores}-core machine" if self.cores > CHECK_CORES else None)
        if self.two is not None:
            self.values[_AS_WRITTEN] = []
        chain = pipeline.model.chain()
        by_object = dict(zip(map(id, pipeline.python_chain), chain_stages(pipeline)))
        self.stages = [by_object.get(id(cut.dataset)) for cut in self.cuts]
        self.chain = chain

    # ------------------------------------------------------------------------------------- the figures

    def _rounds(self) -> int:
        return min(len(values) for values in self.values.values()) if self.values else 0

    def _attributes(self) -> list[dict]:
        """Per cut: its model stage's node and op, elements per sample, calls and why, thread, cache, and the index
        of the cut its cost is taken from (None: from nothing, after a cache that serves the stages before it)."""
        model = self.pipeline.model
        matched = match_autotune(self.autotune, self.chain)
        ran_parallel = {node for node, index in matched.items() if self.autotune[index].name.startswith("Parallel")}
        samples = model.output_samples()
        serving = [s for s in self.chain if s.family == "cache" and s not in model.caches_after_endless_repeat()]
        cache_at = min((self.chain.index(s) for s in serving), default=None)

        def calls_of(stage) -> tuple[int | None, str]:
            if stage is None:
                return 1, "not found in the pipeline's model: taken as sequential"
            if len(stage.inputs) > 1:
                branches = [s for s in model.branch_stages(stage) if calls_of(s)[0] != 1]
                return (None, f"its branch {branches[0].method} runs in parallel") if branches else \
                    (1, "its branches run one element at a time")
            if stage.parallelism == AUTOTUNE:
                return None, "num_parallel_calls=AUTOTUNE"
            if stage.op == SEQUENTIAL_MAP_OP and stage.node in ran_parallel:
                return None, "a plain map tf.data made parallel (map_parallelization, AUTOTUNE)"
            if stage.parallelism is not None and stage.parallelism > 1:
                return stage.parallelism, f"num_parallel_calls={stage.parallelism}"
            return 1, "one element at a time, in the thread that pulls it"

        threads, thread = {}, 0
        for stage in self.chain:  # sequential stages between two buffers or parallel stages share one thread
            asynchronous = stage.family in _ASYNC_FAMILIES or calls_of(stage)[0] != 1
            if not asynchronous:
                threads[stage.node] = thread
            else:
                thread += 1
        out = []
        for index, (cut, stage) in enumerate(zip(self.cuts, self.stages)):
            calls, why = calls_of(stage)
            position = self.chain.index(stage) if stage is not None else None
            before = self.stages[index - 1] if index else None
            after_cache = (cache_at is not None and position is not None and position > cache_at
                           and (before is None or self.chain.index(before) < cache_at))
            per = samples.get(stage.node, 0) if stage is not None else 0
            out.append({"stage": cut.stage, "node": None if stage is None else stage.node,
                        "op": None if stage is None else stage.op, "elements_per_sample": 1 / per if per else 1.0,
                        "calls": calls, "parallel_by": why, "thread": threads.get(stage.node) if stage else None,
                        "cached": cache_at is not None and position is not None and position < cache_at,
                        "previous": None if after_cache or not index else index - 1,
                        "matched": matched.get(stage.node) if stage is not None else None})
        return out

    def _per_sample(self, attributes: list[dict], r: int, *, cpu: bool = False) -> list[float]:
        """Round r's cost per sample of each cut: its prefix's seconds per sample less the reading's and the
        previous prefix's (cpu: its process CPU seconds per sample)."""
        def seconds(index: int) -> float:
            kind = ("one", "batched" if self.cuts[index].batched else "unbatched")
            twin = self.values.get(kind)
            reading = self._core_s(kind, r, cpu=cpu) if twin and len(twin) > r else 0.0
            return self._core_s(("one", index), r, cpu=cpu) - reading

        return [seconds(i) - (seconds(a["previous"]) if a["previous"] is not None else 0.0)
                for i, a in enumerate(attributes)]

    def _core_s(self, key, r: int, *, cpu: bool = False) -> float:
        """Seconds per sample of a confined read in round r: its seconds on the one thread, times the cores it used
        where work outside the confinement overlapped it (process CPU per wall above 1); cpu: its process CPU
        seconds per sample (below the thread's where it waited)."""
        used = self.cpu.get(key, [])
        share = used[r] if len(used) > r else 1.0
        return (share if cpu else max(1.0, share)) / self.values[key][r]

    def figures(self) -> CapacityFigures | None:
        rounds = self._rounds()
        if not self.cuts or not rounds:
            return None
        attributes = self._attributes()
        per_round = [self._per_sample(attributes, r) for r in range(rounds)]
        cpu_round = [self._per_sample(attributes, r, cpu=True) for r in range(rounds)]
        costs = [[row[i] / a["elements_per_sample"] for row in per_round] for i, a in enumerate(attributes)]
        cpus = [[row[i] / a["elements_per_sample"] for row in cpu_round] for i, a in enumerate(attributes)]

        def models(r: int) -> list[StageCost]:  # round r's stages, a negative cost (noise on a free stage) as 0
            return [StageCost(stage=a["stage"], cost_s=max(costs[i][r], 0.0), cpu_s=max(cpus[i][r], 0.0),
                              elements_per_sample=a["elements_per_sample"], calls=a["calls"], thread=a["thread"],
                              cached=a["cached"])
                    for i, a in enumerate(attributes)]

        # the check's side reads the pipeline as the prefixes are: its prediction holds that reading, on its thread
        kind = ("one", "batched" if self.cuts[-1].batched else "unbatched")
        reading = self.values.get(kind, [])
        predicted = [ceiling([*models(r), StageCost("the reading", cost_s=self._core_s(kind, r), calls=1,
                                                    cpu_s=self._core_s(kind, r, cpu=True))]
                             if len(reading) > r else models(r), CHECK_CORES) for r in range(rounds)]
        measured = self.values.get(_AS_WRITTEN, [])[:rounds]
        ratios = [p / m for p, m in zip(predicted, measured) if m > 0 and math.isfinite(p)]
        nodes = self._named(attributes)
        whole_cpu = self.cpu.get(("one", len(self.cuts) - 1), [])[:rounds]
        stages = [CapacityStage(stage=a["stage"], node=a["node"], op=a["op"], cost=estimate(costs[i]),
                                cpu=estimate(cpus[i]),
                                elements_per_sample=a["elements_per_sample"], calls=a["calls"],
                                parallel_by=a["parallel_by"], thread=a["thread"], cached=a["cached"],
                                autotune=nodes.get(a["matched"]))
                  for i, a in enumerate(attributes)]
        parts = split(without_call_limits([stage.model() for stage in stages]), self.cores)
        stages = tuple(s if s.calls == 1 else replace(s, split_cores=part.cores, split_calls=part.calls)
                       for s, part in zip(stages, parts))
        finite = [p for p in predicted if math.isfinite(p)]
        return CapacityFigures(
            method=METHOD, stages=stages, cores=self.cores,
            predicted_2core=estimate(finite) if finite else None,
            measured_2core=estimate(measured) if measured else None,
            check=estimate(ratios, CHECK_BOUNDARIES) if ratios else None, check_how=self._check_how(),
            cpu_per_wall=estimate(whole_cpu) if whole_cpu else None,
            cpu_per_wall_2core=estimate(self.cpu2) if self.cpu2 else None,
            cpu_per_sample_ratio=self._cpu_ratio(rounds, measured), autotune=tuple(nodes.values()),
            autotune_source=self.autotune_source, target_cores=self.target_cores)

    def _named(self, attributes: list[dict]) -> dict[int, AutotuneNode]:
        """AUTOTUNE's nodes by index, each with the stage it is (its prefix's words where it is one, else its
        method); over the pipeline's output only the prefetch tf.data injects (the rest is perfsuite's reading)."""
        prefix = {a["node"]: a["stage"] for a in attributes}
        words: dict[int, list[str]] = {}
        matched = match_autotune(self.autotune, self.chain)
        for stage in self.chain:
            index = matched.get(stage.node)
            if index is not None:  # a node tf.data fused from several stages is each of them
                words.setdefault(index, []).append(prefix.get(stage.node, stage.method))
        last, out = max(words, default=-1), {}
        for index, node in enumerate(self.autotune):
            if index > last and node.name == "Prefetch":  # over the pipeline's output: what tf.data injects
                out[index] = replace(node, stage="the prefetch tf.data injects at the end")
            elif index <= last or node.name == "Root":  # (over the output otherwise: perfsuite's reading, left out)
                out[index] = replace(node, stage=" + ".join(words[index]) if index in words else None)
        return out

    def _cpu_ratio(self, rounds: int, measured: list[float]):
        """Per round, the two-core side's process CPU per sample over the whole pipeline's confined (None: unpaired)."""
        key = ("one", len(self.cuts) - 1)
        whole, cpu = self.values[key], self.cpu.get(key, [])
        if not measured or len(cpu) < rounds or len(self.cpu2) < rounds:
            return None
        return estimate([(self.cpu2[r] / measured[r]) / (cpu[r] / whole[r]) for r in range(rounds)])

    def _check_how(self) -> str:
        if self.two is None:
            return (f"this machine has {self.cores} usable core(s): the pipeline cannot be measured on "
                    f"{CHECK_CORES}, so the prediction stands unchecked")
        return (f"paired interleaved rounds in this one process, alternating order: every prefix confined to one "
                f"core, and the whole pipeline {self.two} (a fresh iterator per round, drained of its warm-up and "
                "buffers)")

    def decided(self) -> bool:
        found = self.figures()
        if found is None:
            return False
        if found.check is None:
            return self._rounds() >= MIN_ROUNDS
        return found.check.decided

    def more_rounds(self) -> float:
        found = self.figures()
        return float(MIN_ROUNDS) if found is None or found.check is None else more_rounds_for(found.check)

    # ------------------------------------------------------------------------------------- the rounds

    def run(self, stage: Stage) -> CapacityFigures | None:
        cuts = self.cuts
        if not cuts:
            stage.planned("no stage that does work: nothing to cost")
            return None
        keys = len(cuts) + 2 + (self.two is not None)
        read_s = max(MIN_READ_S, stage.left_s() / (TARGET_ROUNDS * keys * 2))
        if stage.left_s() < 2 * read_s * keys * MIN_ROUNDS:
            stage.planned(f"{len(cuts)} prefixes and the pipeline as written: no time left for {MIN_ROUNDS} rounds",
                          status_from(False, self._rounds()))
            return self.figures()
        stage.planned(f"{len(cuts)} prefixes ({', '.join(c.stage for c in cuts)}) confined to one core, and the "
                      f"pipeline {self.two or '(no two-core side: 1 core)'}, read for {read_s:.2f} s each per round, "
                      "interleaved, until the two-core check is decided against its margin")
        started = time.perf_counter()
        sources = {("one", index): counted(cut.dataset.repeat(), batched=cut.batched)
                   for index, cut in enumerate(cuts)}
        sources.update({("one", kind): twin for kind, twin in reading_cost(cuts).items()})
        sources = {key: confined(source, CONFINED) for key, source in sources.items()}
        drains = {key: self.warmup + buffered_elements(source) for key, source in sources.items()}
        streams = {key: Stream(source, self.spec, drain=drains[key]) for key, source in sources.items()}
        whole = {("one", index): pass_reads(cut) for index, cut in enumerate(cuts)}
        start_s = time.perf_counter() - started

        def one(key) -> float:
            cpu, wall = time.process_time(), time.perf_counter()
            rate = read_rate(streams[key], drain=drains[key], read_s=read_s, whole=whole.get(key),
                             batched=_batched(cuts, key[1]))
            self.cpu.setdefault(key, []).append((time.process_time() - cpu) / (time.perf_counter() - wall))
            return rate

        runs = {key: functools.partial(one, key) for key in streams}
        if self.two is not None:
            runs[_AS_WRITTEN] = functools.partial(self._as_written, read_s)
        for key in runs:
            self.values.setdefault(key, [])
        rounds = InterleavedRounds(runs, start=self._rounds(), values=self.values)
        rounds.until_decided(self.decided, driver=stage.rounds_until_decided,
                             first_estimate_s=2 * read_s * keys + start_s)
        for stream in streams.values():
            stream.close()
        stage.status = status_from(self.decided(), self._rounds())
        return self.figures()

    def as_written(self):
        """The whole pipeline as the user wrote it, read as the prefixes are (counted: the same reading as the
        reading's twin, so the check's prediction holds it too), with the prefetch tf.data would inject at its end
        (counted() turns injection off), on CHECK_CORES cores: this machine's, or as many threads on a larger one."""
        dataset, model = self.pipeline.dataset, self.pipeline.model
        last = model.last_real_stage()
        if model.inject_prefetch and (last is None or last.family != "prefetch"):
            dataset = dataset.prefetch(tensorflow().data.AUTOTUNE)
        source = counted(dataset, batched=self.cuts[-1].batched)
        return source if self.cores == CHECK_CORES else confined(source, CHECK_CORES)

    def _as_written(self, read_s: float) -> float:
        """One round's samples/s of the pipeline on two cores (as_written()): a fresh iterator, drained of its warm-up
        and what its buffers hold, read for read_s (MIN_READS at least); AUTOTUNE's model read after, then closed,
        so that no buffer of it refills behind the next reads."""
        source = self.as_written()
        stream = Stream(source, self.spec, drain=self.warmup + buffered_elements(source))
        cpu, wall = time.process_time(), time.perf_counter()
        rate = read_rate(stream, drain=0, read_s=read_s, batched=self.cuts[-1].batched)
        self.cpu2.append((time.process_time() - cpu) / (time.perf_counter() - wall))
        try:
            self.autotune = read_autotune(stream)
            self.autotune_source = (
                "tf.data's own autotuning model of the iterator (IteratorGetModelProto), read after the last round; "
                "each value as the iterator used it" if self.autotune else
                "tf.data built no autotuning model for this iterator (autotune off in the pipeline's options?)")
        except Exception as error:  # noqa: BLE001 -- an internal op TensorFlow may change: said, never guessed
            self.autotune, self.autotune_source = (), f"not readable: {one_line_error(error)}"
        stream.close()
        return rate

    # ------------------------------------------------------------------------------------- the fix

    def split_fix(self, figures: CapacityFigures | None) -> rewrite.Fix | rewrite.NotApplied:
        """The model's split as a fix: each stage whose graph sets num_parallel_calls set to its split for this
        machine's cores (the fixes stage measures it against the pipeline as written)."""
        if figures is None or not any(s.cost is not None for s in figures.stages):
            return rewrite.NotApplied(SPLIT_FIX, "the capacity stage measured no stage costs")
        if self.pipeline.graph_def is None:
            return rewrite.NotApplied(SPLIT_FIX, f"the graph cannot be rewritten: {self.pipeline.model.read_from}")
        nodes = {s.node: s for s in self.stages if s is not None}
        settable = {s.node: s.split_calls for s in figures.stages
                    if s.node in nodes and s.split_calls and nodes[s.node].parallelism is not None
                    and nodes[s.node].op != SEQUENTIAL_MAP_OP}
        if not settable:
            return rewrite.NotApplied(SPLIT_FIX, "no stage sets num_parallel_calls: the split has nothing to set "
                                                 "(sequential stages stay so; map-parallelism makes maps parallel)")
        if all(nodes[node].parallelism == calls for node, calls in settable.items()):
            return rewrite.NotApplied(SPLIT_FIX, "the pipeline already sets the split's parallel calls")
        words = ", ".join(f"{s.stage} {s.split_calls}" for s in figures.stages if s.node in settable)
        return rewrite.Fix(SPLIT_FIX, f"setting num_parallel_calls to the capacity model's split for this machine's "
                                      f"{figures.cores} cores ({words})",
                           lambda pipeline: rewrite.with_parallel_calls(pipeline, settable))


def with_step_need(capacity: CapacityFigures | None, step_time: str | None, batch, bound, step, feed
                   ) -> CapacityFigures | None:
    """The capacity figures with the step's need: --step-time's seconds where given, else the measured step (fed a
    synthetic batch where measured: the input-bound figures, else its second call: the step's run), else the preset's
    step on these batches (the feed figures); the samples per batch from the first batch."""
    from perfsuite.measure.emulated import STEP_PRESETS

    count, unit = samples_in(batch)
    step_s, source = None, None
    if step_time is not None and step_time not in STEP_PRESETS:
        step_s, source = float(step_time), "--step-time"
    elif bound is not None:
        step_s, source = bound.t_synthetic, "the measured step (--step), fed a synthetic batch"
    elif step is not None:
        step_s, source = step.first_steady_s, "the measured step (--step), its second call"
    elif feed is not None and feed.step_s:
        step_s, source = feed.step_s, f"the {feed.step_time} step on these batches, --step-time"
    return with_need(capacity, step_s=step_s, step_source=source, batch=count if unit == "samples" else None)
