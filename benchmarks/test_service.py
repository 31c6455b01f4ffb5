"""The TF-native WAV loader served by tf.data service: throughput vs worker count, scaling efficiency,
ratio to the same loader run locally, and the exactly-once check of distributed_epoch.

Each worker runs the loader with num_parallel_calls=1, so the worker count is the one knob that adds
CPU: N workers can at best multiply 1 worker's rate by N while N ≤ the cores, and past the cores they
only compete.
All figures are same-run ratios of interleaved rounds (A B, B A, ...): service-N vs local, and
service-N vs service-1; scaling_efficiency = (rate_N / rate_1) / N.

Every round reads a fresh job (parallel_epochs over the repeated loader): its first batch (job
start-up) is a warm-up batch. Before every round (either side), SETTLE_S lets the workers finish
what they prefetched for the job the previous round abandoned, so it steals no CPU from this one.
"""

import time
from statistics import median

import pytest

from perfsuite.data.corpus import PRESETS, build_corpus, read_metadata
from perfsuite.data.loaders import LoaderConfig, build_loader
from perfsuite.measure.rounds import interleaved
from perfsuite.measure.timing import ab_result, ab_runs, measure_dataset
from perfsuite.pytest_plugin import benchmark_adapter
from perfsuite.workload.service import ServiceCluster, distribute, with_deadline

pytestmark = [pytest.mark.service, pytest.mark.benchmark(group="service")]  # its own pytest-benchmark table

BATCH = 16
CORPUS = "small"
WARMUP_BATCHES = 2
SETTLE_S = 0.5
BATCH_TIMEOUT_S = 120.0  # a lost worker fails the round instead of hanging the run
# Per profile: worker counts, interleaved rounds, measured batches per round.
# quick stays on (1, 2), within the cores of the smallest CI box; full adds counts past the cores to
# show saturation.
PLAN = {
    "smoke": ((1, 2), 2, 6),
    "quick": ((1, 2), 3, 12),
    "full": ((1, 2, 3, 4), 9, 24),
}


def _profile_name(config) -> str:
    name = config.getoption("perfsuite_profile", default="quick")
    if name not in PLAN:
        raise ValueError(f"--perfsuite-profile: expected one of {sorted(PLAN)}, found {name!r}")
    return name


def pytest_generate_tests(metafunc):
    if "service_workers" in metafunc.fixturenames:
        counts = PLAN[_profile_name(metafunc.config)][0]
        metafunc.parametrize("service_workers", counts, ids=[f"w{n}" for n in counts])


@pytest.fixture(scope="module")
def plan(pytestconfig):
    name = _profile_name(pytestconfig)
    _, rounds, measure_batches = PLAN[name]
    return {"profile": name, "rounds": rounds, "measure_batches": measure_batches}


@pytest.fixture(scope="module")
def corpus(pytestconfig):
    return build_corpus(PRESETS[CORPUS], root=pytestconfig.getoption("perfsuite_data_dir", default=None))


@pytest.fixture(scope="module")
def loader(corpus):
    config = LoaderConfig(kind="tf_native", source="wav", batch_size=BATCH, num_parallel_calls=1)
    return build_loader(dataset_dir=corpus, config=config)


class _Clusters:
    """Clusters by worker count, started on first use and all stopped at the end of the module."""

    def __init__(self):
        self._started: dict[int, ServiceCluster] = {}

    def get(self, workers: int) -> ServiceCluster:
        if workers not in self._started:
            cluster = ServiceCluster(workers=workers)
            cluster.start()
            self._started[workers] = cluster
        return self._started[workers]

    def stop_all(self) -> None:
        for cluster in self._started.values():
            cluster.stop()
        self._started.clear()


@pytest.fixture(scope="module")
def clusters():
    pool = _Clusters()
    yield pool
    pool.stop_all()


def _settled(measure):
    def run():
        time.sleep(SETTLE_S)
        return measure()
    return run


def _local(loader, measure_batches):
    def measure():
        return measure_dataset(dataset=loader.dataset.repeat(), warmup_batches=WARMUP_BATCHES,
                               measure_batches=measure_batches, name="local")
    return measure


def _service(loader, cluster, measure_batches):
    dataset = distribute(loader.dataset.repeat(), cluster=cluster, processing_mode="parallel_epochs")
    served = with_deadline(dataset, batch_timeout_s=BATCH_TIMEOUT_S, cluster=cluster)

    def measure():
        return measure_dataset(dataset=served, warmup_batches=WARMUP_BATCHES, measure_batches=measure_batches,
                               name=f"service-w{cluster.workers}")
    return measure


def test_service_throughput(benchmark, loader, clusters, plan, service_workers):
    rounds, measure_batches = plan["rounds"], plan["measure_batches"]
    service = _service(loader, clusters.get(service_workers), measure_batches)

    def measure():
        vs_local = ab_result(*interleaved(ab_runs(_settled(service), _settled(_local(loader, measure_batches))),
                                          rounds=rounds, warmup_rounds=1))
        vs_one = None
        if service_workers > 1:
            one_worker = _service(loader, clusters.get(1), measure_batches)
            vs_one = ab_result(*interleaved(ab_runs(_settled(service), _settled(one_worker)), rounds=rounds,
                                            warmup_rounds=1))
        return vs_local, vs_one

    # Timed once by pytest-benchmark; its figures become the service rounds' seconds per sample.
    vs_local, vs_one = benchmark_adapter.time_rounds(benchmark, measure, rounds=1)
    benchmark_adapter.time_per_unit(benchmark, [1 / value for value in vs_local.a_values], unit="s/sample")
    info = {
        "profile": plan["profile"], "workers": service_workers, "processing_mode": "parallel_epochs",
        "corpus": CORPUS, "batch_size": BATCH, "worker_parallel_calls": 1, "rounds": rounds,
        "measure_batches": measure_batches,
        "samples_per_s": median(vs_local.a_values),
        "local_samples_per_s": median(vs_local.b_values),
        "service_over_local_ratio": vs_local.summary.median,
        "service_over_local_ratio_low": vs_local.summary.low,
        "service_over_local_ratio_high": vs_local.summary.high,
        "service_over_local_ratio_spread": vs_local.summary.spread,
    }
    if vs_one is not None:
        info.update({
            "one_worker_samples_per_s": median(vs_one.b_values),
            "workers_over_one_worker_ratio": vs_one.summary.median,
            "workers_over_one_worker_ratio_low": vs_one.summary.low,
            "workers_over_one_worker_ratio_high": vs_one.summary.high,
            "workers_over_one_worker_ratio_spread": vs_one.summary.spread,
            "scaling_efficiency": vs_one.summary.median / service_workers,
        })
    benchmark.extra_info.update(info)
    assert info["samples_per_s"] > 0
    figures = [value for key, value in info.items() if key.endswith(("ratio", "efficiency"))]
    assert all(0 < value < float("inf") for value in figures), info


def test_distributed_epoch_yields_every_sample_exactly_once(benchmark, corpus, loader, clusters):
    cluster = clusters.get(2)
    served = with_deadline(distribute(loader, cluster=cluster, processing_mode="distributed_epoch"),
                           batch_timeout_s=BATCH_TIMEOUT_S, cluster=cluster)

    def epoch():
        start = time.perf_counter()
        ids = [sample.decode() for batch in served for sample in batch["id"].numpy()]
        return ids, time.perf_counter() - start

    # One round (an epoch) timed by pytest-benchmark; its figure becomes the epoch's seconds per sample.
    ids, seconds = benchmark_adapter.time_rounds(benchmark, epoch, rounds=1)
    benchmark_adapter.time_per_unit(benchmark, [seconds / len(ids)] if ids else [], unit="s/sample")
    benchmark.extra_info.update({"workers": 2, "processing_mode": "distributed_epoch", "samples": len(ids),
                                 "samples_per_s": len(ids) / seconds})
    assert len(ids) == loader.num_samples
    assert sorted(ids) == sorted(utterance.id for utterance in read_metadata(corpus))

