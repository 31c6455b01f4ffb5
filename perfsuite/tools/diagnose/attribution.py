"""The bottleneck stage: every prefix of the pipeline read inside TensorFlow in interleaved rounds, each
stage's share of the time per sample, and the stage that limits throughput."""

from __future__ import annotations

import functools
import time

from perfsuite._tensorflow import tensorflow
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.tools.diagnose import rewrite
from perfsuite.tools.diagnose.plan import TARGET_ROUNDS, Stage, more_rounds, status_from
from perfsuite.tools.diagnose.streams import Stream, buffered_elements, timed_next
from perfsuite.verdict import diagnosis_figures as fig
from perfsuite.verdict.pipeline_findings import consistent
from perfsuite.workload.pipeline_model import known_cardinality

MIN_READ_S = 0.05  # a prefix or fix read for at least this long per round ...
MIN_READS = 2  # ... and at least this many reads
UNBATCHED_READ = 32  # elements of an unbatched prefix counted a read, batched in TensorFlow (no Python each)
LONGEST_PASS = 4  # a round reads on to whole passes of a finite prefix when that ends within this many read_s


def counted(dataset, *, batched: bool):
    """dataset as the samples each element holds (its leading dimension, or 1 counted UNBATCHED_READ a read),
    read in TensorFlow as the stage after it reads it: no Python cost per element, no copy to the host."""
    tf = tensorflow()
    if batched:
        counts = dataset.map(lambda *element: tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0])
    else:  # a scan, not a map: tf.data fuses a map with the batch after it, calling the prefix from threads
        counts = dataset.scan(tf.constant(0, tf.int64),
                              lambda state, *element: (state, tf.constant(1, tf.int64))).batch(UNBATCHED_READ)
    # no prefetch injected after the count: it would fill while the prefix is idle
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False
    return counts.with_options(options)


def pass_reads(cut) -> int | None:
    """Reads of counted(cut.dataset) in one pass of a finite prefix (known_cardinality); None when endless,
    unknown, or (unbatched) not a whole number of UNBATCHED_READ groups."""
    count = known_cardinality(cut.dataset)
    if count <= 0 or (not cut.batched and count % UNBATCHED_READ):  # endless, empty, unknown or a part read
        return None
    return count if cut.batched else count // UNBATCHED_READ


def read_rate(stream: Stream, *, drain: int, read_s: float, batched: bool, whole: int | None = None) -> float:
    """Samples per second of a counted() stream, `drain` reads untimed, then read for read_s; with `whole`
    (pass_reads) on to whole passes where soon enough, so that every round holds as many of its restarts."""
    stream.drain(drain)
    samples, spent, reads = 0, 0.0, 0
    while spent < read_s or reads < MIN_READS or _to_a_whole_pass(reads, spent, whole, read_s):
        element, seconds = timed_next(stream)
        samples += int(element.numpy().sum())
        spent += seconds
        reads += 1
    return samples / spent


def _to_a_whole_pass(reads: int, spent: float, whole: int | None, read_s: float) -> bool:
    """Whether reading on to the end of the pass is estimated (at the round's rate so far) to end in time."""
    if not whole or not reads % whole:
        return False
    return spent + (whole - reads % whole) * spent / reads <= LONGEST_PASS * read_s


class BottleneckRounds:
    """Each prefix (rewrite.prefixes) read every interleaved round until the limiting stage is decided."""

    def __init__(self, dataset, spec: str, *, warmup: int):
        self.cuts, self.spec, self.warmup = rewrite.prefixes(dataset), spec, warmup
        self.rates: dict = {index: [] for index in range(len(self.cuts))}  # and the reading's own, by kind

    def figures(self) -> fig.Bottleneck | None:
        return _bottleneck(self.cuts, self.rates) if self.rates and self.rates[0] else None

    def more_rounds(self) -> float:
        """Rounds more for the largest share's interval to clear the next largest."""
        found = self.figures()
        if found is None or len(found.stages) < 2:
            return float(fig.MIN_ROUNDS)
        top, runner = sorted((s.share for s in found.stages), key=lambda x: x.median, reverse=True)[:2]
        width = (top.high - top.low) / 2 + (runner.high - runner.low) / 2
        return more_rounds(top.rounds, width, top.median - runner.median)

    def run(self, stage: Stage) -> fig.Bottleneck | None:
        cuts, rates = self.cuts, self.rates
        if len(cuts) < 2:
            stage.planned("one stage only: nothing to attribute")
            return None
        read_s = max(MIN_READ_S, stage.left_s() / (TARGET_ROUNDS * len(cuts) * 2))
        if stage.left_s() < 2 * read_s * len(cuts) * fig.MIN_ROUNDS:
            stage.planned(f"{len(cuts)} prefixes: no time left for {fig.MIN_ROUNDS} rounds of them",
                          fig.TOO_SHORT if len(rates[0]) < fig.MIN_ROUNDS else fig.UNDECIDED)
            return self.figures()
        stage.planned(f"{len(cuts)} prefixes ({', '.join(c.stage for c in cuts)}), each started and drained, "
                      f"then drained and read for {read_s:.2f} s per round (on to whole passes where finite),"
                      " interleaved, until the limiting stage is decided")
        started = time.perf_counter()
        sources = {i: counted(cut.dataset.repeat(), batched=cut.batched) for i, cut in enumerate(cuts)}
        sources.update(reading_cost(cuts))
        drains = {index: self.warmup + buffered_elements(source) for index, source in sources.items()}
        # the start-ups (drained as each stream is made), before any round: a round's estimate holds none
        streams = {index: Stream(source, self.spec, drain=drains[index]) for index, source in sources.items()}
        whole = {index: pass_reads(cut) for index, cut in enumerate(cuts)}  # the reading's own: endless
        start_s = time.perf_counter() - started

        def read(key) -> float:
            return read_rate(streams[key], drain=drains[key], read_s=read_s, whole=whole.get(key),
                             batched=key == "batched" or (key != "unbatched" and cuts[key].batched))

        # This pass's streams are fresh; its rounds continue the earlier passes' rates and their order.
        rounds = InterleavedRounds({key: functools.partial(read, key) for key in streams},
                                   start=len(rates[0]), values=rates)
        rounds.until_decided(lambda: _bottleneck(cuts, rates).decided, driver=stage.rounds_until_decided,
                             first_estimate_s=2 * read_s * len(cuts) + start_s / 2)
        for stream in streams.values():
            stream.close()
        stage.status = status_from(_bottleneck(cuts, rates).decided, len(rates[0]))
        return self.figures()


def reading_cost(cuts) -> dict:
    """The reading's own cost, taken off every prefix's: counted() of datasets that do no work, of the kinds
    the prefixes are ('unbatched': an endless range; 'batched': batched as the first batched prefix)."""
    tf = tensorflow()
    source = tf.data.Dataset.range(2 ** 62)
    twins = {"unbatched": counted(source, batched=False)}
    batched = next((cut for cut in cuts if cut.batched), None)
    if batched is not None:
        size = int(next(iter(counted(batched.dataset, batched=True))).numpy().sum())
        twins["batched"] = counted(source.batch(max(size, 1)), batched=True)
    return twins


def _bottleneck(cuts, rates: dict) -> fig.Bottleneck:
    """Each stage's share from the rounds' prefix rates, less the reading's own (reading_cost) that round."""
    rounds = len(rates[0])
    if not rounds:
        return fig.Bottleneck(stages=(), limiting=None, decided=False)

    def seconds(i: int, r: int) -> float:
        twin = rates.get("batched" if cuts[i].batched else "unbatched")
        reading = 1 / twin[r] if twin and len(twin) > r else 0.0
        return 1 / rates[i][r] - reading

    per_sample = [[seconds(i, r) for i in range(len(cuts))] for r in range(rounds)]
    worked = [r for r, row in enumerate(per_sample) if row[-1] > 0]  # a share is a part of a positive whole
    no_work = rounds - len(worked)
    if not worked:
        return fig.Bottleneck(stages=(), limiting=None, decided=False, no_work_rounds=no_work)
    shares = {i: [(per_sample[r][i] - (per_sample[r][i - 1] if i else 0.0)) / per_sample[r][-1]
                  for r in worked] for i in range(len(cuts))}
    stages = tuple(fig.StageShare(stage=cut.stage, rate=fig.estimate(rates[i]), share=fig.estimate(shares[i]))
                   for i, cut in enumerate(cuts))
    top = max(range(len(stages)), key=lambda i: stages[i].share.median)
    decided = len(worked) >= fig.MIN_ROUNDS and no_work <= len(worked) and consistent(stages) and all(
        stages[top].share.low > s.share.high for i, s in enumerate(stages) if i != top)
    return fig.Bottleneck(stages=stages, limiting=stages[top].stage, decided=decided, no_work_rounds=no_work)
