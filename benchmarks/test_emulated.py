"""Emulated accelerator: does each loader keep a GPU step busy? The GPU gates on every CPU runner.

Each loader feeds an emulated step (perfsuite.measure.emulated: the step sleeps for its device time,
so the pipeline keeps the CPU it would have next to a real GPU). A round is one emulated run; its
utilisation timeline gets the NVML statistics (gpu_stats), and the round is the unit: figures are
per round with the median and its order-statistic interval over the rounds.

Steps: "a100" is FastPitch's published A100 training throughput (TF32) per true mel frame, so the step
follows the batch's length (about 50 ms for 16 utterances of the default corpus; STEP_PRESETS names the
source); "fast" is a fixed 10 ms, about the A100 step for 16 short utterances (the smoke corpus's),
and near the shortest step the host loop itself keeps 90 % busy where the runner is loaded (the feed
rate of a source with no cost, test_emulated_feed_rate's host floor; figures in docs/emulated.md).

- test_emulated_step[loader-prefetch]: the A100 step fed by each loader with prefetch on and off. The
  TF-native cache pipeline with prefetch reports the GPU gates' metrics as emulated_* (the twin of
  test_pipeline.py::test_gpu_utilisation, which needs a GPU).
- test_emulated_starvation: at the fast step, rounds interleaved so that the machine's load reaches
  them alike: the TF-native cache pipeline with prefetch keeps the device busy, without prefetch less
  so, and the numpy_function WAV pipeline without prefetch starves it: its utilisation oscillates, and
  the detected period is the step loop's own cycle (a batch's wait plus a step).
- test_emulated_feed_rate: the shortest step each pipeline (with prefetch) keeps ≥ 90 % busy, in
  steps/s and audio s/s, and which of the GPU presets that feeds.

Gated metrics carry their per-round values, so a gate is decided by the interval of the median over
the rounds (perfsuite.verdict.gates); while a gate that counts (not a context one) is inconclusive after
the profile's min_rounds, rounds are added within the budget (the recorder's more_rounds). The
emulated_* metrics are declared in perfsuite.verdict.metrics.
"""

import functools
import statistics
import time

import pytest

from perfsuite.data.audio import MelConfig
from perfsuite.data.loaders import AUTOTUNE, LoaderConfig, build_loader
from perfsuite.measure.emulated import (
    STEP_PRESETS,
    EmulatedRunConfig,
    FeedRateConfig,
    emulated_figures,
    emulated_gate_metrics,
    emulated_stats,
    feed_rate,
    fixed_step,
    run_emulated,
)
from perfsuite.measure.rounds import InterleavedRounds
from perfsuite.measure.stats import median_interval
from perfsuite.measure.teardown import iterate

BATCH, WORKERS = 16, 2
PIPELINES = [("tf_native", "cache"), ("numpy_function", "wav")]
PREFETCH = {"prefetch": AUTOTUNE, "no_prefetch": 0}
A100_STEP = STEP_PRESETS["fastpitch-a100-tf32"]
FAST_STEP = fixed_step(0.01)
GATE_CASE = ("tf_native", "cache", "prefetch")
GATE_METRICS = ("emulated_util_median", "emulated_idle_fraction", "emulated_oscillation", "emulated_complete")
MATRIX_ROUNDS = 3  # figures only: the gate case and the contrast take the profile's min_rounds
# Utilisation samples a round must hold: the cycle detector's minimum; the starvation contrast's rounds
# three times that, so that a round holds enough of the starved loop's cycles for the detector to find
# them (how often it did per round length: docs/emulated.md, "The starved oscillation, with its period").
# Smoke, which only proves the cases run, takes the fewest whose whole intervals cover 90 % of the window
# (perfsuite.measure.emulated_timeline.MIN_COVERAGE), so its emulated_complete is decided by the same rule.
MIN_SAMPLES, STARVATION_SAMPLES, SMOKE_SAMPLES = 32, 96, 10
FEED_SEARCH = {
    "smoke": FeedRateConfig(searches=1, iterations=1, probe_batches=3, budget_s=1.0,
                            run=EmulatedRunConfig(batches=3, warmup_batches=1, min_seconds=0.05, min_samples=0)),
    "quick": FeedRateConfig(searches=3, iterations=2, probe_batches=6, budget_s=5.0,
                            run=EmulatedRunConfig(batches=4, warmup_batches=1, min_seconds=0.1, min_samples=0)),
}

def _batches(corpus, cache, *, kind, source, prefetch):
    """An endless iterator over the loader's batches; full batches only, so every step has the same shape."""
    config = LoaderConfig(kind=kind, source=source, batch_size=BATCH, num_parallel_calls=WORKERS,
                          prefetch=PREFETCH[prefetch], drop_remainder=True)
    return iterate(build_loader(dataset_dir=corpus, cache_dir=cache, config=config).dataset.repeat())


def _run_config(profile, min_samples=MIN_SAMPLES):
    return EmulatedRunConfig(batches=profile.measure_batches, warmup_batches=profile.warmup_batches,
                             min_samples=SMOKE_SAMPLES if profile.name == "smoke" else min_samples)


def _round(batches, step, config):
    run = run_emulated(batches, step=step, config=config)
    return run, emulated_stats(run)


def _rounds(perfsuite, count, measure_round):
    """`count` rounds, through pytest-benchmark (its table shows each round's wall time)."""
    return perfsuite.planned_rounds(lambda index: measure_round(), count)


def _figures(results, prefix="emulated_"):
    """Per round and over rounds (median and its order-statistic interval): the run's figures and the
    NVML statistics of its timeline."""
    rounds = [{**run.figures().as_dict(), **emulated_figures(stats)} for run, stats in results]
    over = {
        "busy_fraction": [run.busy_fraction for run, _ in results],
        "util_median": [stats.util_median for _, stats in results],
        "idle_fraction": [stats.idle_fraction for _, stats in results],
        "oscillation": [float(stats.oscillation.significant) for _, stats in results],
        "starvation_episodes": [float(stats.starvation_episodes) for _, stats in results],
    }
    return {f"{prefix}rounds": rounds,
            **{f"{prefix}{name}_over_rounds": {**median_interval(values).as_dict(), "rounds": values}
               for name, values in over.items()}}


def _gate_rounds(results, *, names, prefix="emulated_"):
    """The GPU gates' metrics (emulated_util_median, ...) in `names`, each round's value, named `prefix` +
    the name's rest."""
    per_round = [emulated_gate_metrics(stats) for _, stats in results]
    return {prefix + name.removeprefix("emulated_"): [float(metrics_of_round[name]) for metrics_of_round in per_round]
            for name in names}


def _add_gate_metrics(perfsuite, results, *, names, prefix="emulated_"):
    """`_gate_rounds` added as gated metrics, the median round as the value."""
    for metric, values in _gate_rounds(results, names=names, prefix=prefix).items():
        perfsuite.add(metric, statistics.median(values), rounds=values)


def _any_undecided(perfsuite, gate_rounds):
    """Whether a gate that counts on any of these metrics (name: per-round values) is inconclusive."""
    return any(perfsuite.gate_undecided(metric, statistics.median(values), values)
               for metric, values in gate_rounds.items() if values)


def _more_rounds(perfsuite, name, one_round, *, gate_rounds, rounds, started, step=1):
    """Rounds added while a gate is inconclusive (the recorder's rule: within max_rounds and twice the
    budget; the summary notes a gate left undecided)."""
    perfsuite.more_rounds(name, one_round, rounds=rounds, spent_s=time.perf_counter() - started, step=step,
                          undecided=lambda: _any_undecided(perfsuite, gate_rounds()))


@pytest.mark.parametrize("prefetch", list(PREFETCH))
@pytest.mark.parametrize("kind,source", PIPELINES, ids=[f"{k}-{s}" for k, s in PIPELINES])
def test_emulated_step(perfsuite, perfsuite_corpus, perfsuite_cache, kind, source, prefetch):
    """The A100 step fed by one loader; the gate case takes the profile's min_rounds, the others fewer."""
    batches = _batches(perfsuite_corpus, perfsuite_cache, kind=kind, source=source, prefetch=prefetch)
    gate_case = (kind, source, prefetch) == GATE_CASE
    profile = perfsuite.profile
    rounds = profile.min_rounds if gate_case else min(profile.min_rounds, MATRIX_ROUNDS)
    config = _run_config(profile)
    started = time.perf_counter()
    results = _rounds(perfsuite, rounds, lambda: _round(batches, A100_STEP, config))
    if gate_case:  # more rounds while one of its gates is inconclusive
        _more_rounds(perfsuite, "emulated_step", lambda: results.append(_round(batches, A100_STEP, config)),
                     gate_rounds=lambda: _gate_rounds(results, names=GATE_METRICS), rounds=rounds, started=started)
    perfsuite.record({"emulated_step": A100_STEP.as_dict(), **_figures(results)})
    busy = [run.busy_fraction for run, _ in results]  # every case's headline figure, gated by no claim
    perfsuite.add("emulated_busy_fraction", statistics.median(busy), rounds=busy)
    if gate_case:  # the same gates as a GPU runner's (ratios.yaml), under their emulated_ names
        _add_gate_metrics(perfsuite, results, names=GATE_METRICS)
    assert all(stats.samples > 0 for _, stats in results)


CONTRAST = {  # label: (kind, source, prefetch)
    "fed": ("tf_native", "cache", "prefetch"),
    "unprefetched": ("tf_native", "cache", "no_prefetch"),
    "starved": ("numpy_function", "wav", "no_prefetch"),
}


def test_emulated_starvation(perfsuite, perfsuite_corpus, perfsuite_cache):
    """The fast step fed by the three, one round of each per round, forwards then backwards: the per-round
    ratios and the ranges compare pipelines under the same load."""
    sources = {label: _batches(perfsuite_corpus, perfsuite_cache, kind=k, source=s, prefetch=p)
               for label, (k, s, p) in CONTRAST.items()}
    config = _run_config(perfsuite.profile, STARVATION_SAMPLES)
    # forwards, then backwards (measure.rounds.alternating)
    engine = InterleavedRounds({label: functools.partial(_round, sources[label], FAST_STEP, config)
                                for label in CONTRAST})
    results, one_round = engine.values, engine.one_round

    started, planned = time.perf_counter(), perfsuite.profile.min_rounds
    _rounds(perfsuite, planned, one_round)
    # Pairs of rounds (forwards, backwards) while a gate that counts is inconclusive: here the prefetch
    # ratio; the starved contrasts are context gates, which spend no budget but are shown on every round.
    _more_rounds(perfsuite, "emulated_starvation", one_round, gate_rounds=lambda: _starvation_rounds(results),
                 rounds=planned, started=started, step=2)
    busy = _busy(results)
    figures = {"emulated_step": FAST_STEP.as_dict()}
    for label, rounds in results.items():
        figures.update(_figures(rounds, prefix=f"emulated_{label}_"))
    perfsuite.record(figures)
    for name, values in _starvation_rounds(results).items():
        if values:
            perfsuite.add(name, statistics.median(values), rounds=values)
    assert max(busy["starved"]) < min(busy["fed"]), (
        f"expected every starved round below every fed one, found starved {busy['starved']} vs fed {busy['fed']}")


def _busy(results):
    return {label: [run.busy_fraction for run, _ in rounds] for label, rounds in results.items()}


def _starvation_rounds(results):
    """The starvation contrast's gated metrics, per round: the starved step's GPU gates, the detected
    period over the loop's cycle (rounds that oscillate only), and the busy ratios (at a fixed step, busy
    fraction = steps/s x step: these are speed ratios, round by round)."""
    busy = _busy(results)
    ratios = {name: [x / y for x, y in zip(busy[a], busy[b])]
              for name, (a, b) in {"emulated_fed_over_starved_busy_ratio": ("fed", "starved"),
                                   "emulated_prefetch_over_no_prefetch_busy_ratio": ("fed", "unprefetched")}.items()}
    return {**_gate_rounds(results["starved"], names=GATE_METRICS[:3], prefix="emulated_starved_"),
            "emulated_starved_period_over_cycle": _period_over_cycle(results["starved"], FAST_STEP.fixed_s), **ratios}


def _period_over_cycle(results, step_s):
    """Per round whose utilisation oscillates: the detected period over the step loop's cycle (the median
    wait for a batch plus the step): 1 when the detector found the starvation's own rhythm."""
    return [emulated_figures(stats)["emulated_oscillation_period_s"] / (statistics.median(run.wait_s) + step_s)
            for run, stats in results if stats.oscillation.significant]


def _presets_fed(result):
    """For each step preset: its step on this corpus's mean batch, and whether the pipeline keeps it fed."""
    if result.step_s is None or result.audio_s_per_batch is None:
        return {}
    mel = MelConfig()
    frames = result.audio_s_per_batch * mel.sample_rate / mel.hop_length
    return {name: {"step_s": preset.per_frame_s * frames, "fed": result.step_s <= preset.per_frame_s * frames}
            for name, preset in STEP_PRESETS.items()}


def _host_floor(tf, batches):
    """One real batch held in memory and repeated: a source with no cost, so its feed rate is what the
    host loop itself allows on this machine (next() on a tf.data iterator, waking from the step)."""
    return iterate(tf.data.Dataset.from_tensors(next(batches)).repeat().prefetch(AUTOTUNE))


def test_emulated_feed_rate(perfsuite, perfsuite_corpus, perfsuite_cache, tensorflow):
    """The shortest fixed step each pipeline (with prefetch) keeps ≥ 90 % busy, and the host loop's own
    floor: a pipeline whose feed rate is near the floor's is not what limits the step rate here."""
    search = FEED_SEARCH.get(perfsuite.profile.name, FEED_SEARCH["quick"])
    results = {}

    def search_all():
        for kind, source in PIPELINES:
            batches = _batches(perfsuite_corpus, perfsuite_cache, kind=kind, source=source, prefetch="prefetch")
            results[f"{kind}_{source}"] = feed_rate(batches, config=search)
        results["host_floor"] = feed_rate(_host_floor(tensorflow, batches), config=search)

    _rounds(perfsuite, 1, search_all)
    for name, result in results.items():
        perfsuite.record({**result.extra_info(), "presets_fed": _presets_fed(result)}, prefix=f"emulated_{name}_")
    cache, wav, floor = (results[name].steps_per_s for name in ("tf_native_cache", "numpy_function_wav", "host_floor"))
    assert None not in (cache, wav, floor), [result.note for result in results.values()]
    # One ratio per pair of bisections (cache's i-th answer against the WAV pipeline's i-th): the gate is
    # decided from their interval, not from one search's figure.
    pairs = [w / c for c, w in zip(results["tf_native_cache"].answers, results["numpy_function_wav"].answers)]
    perfsuite.add("emulated_feed_rate_cache_over_wav_ratio", cache / wav, rounds=pairs)
    perfsuite.add("emulated_feed_rate_cache_over_host_floor_ratio", cache / floor)
