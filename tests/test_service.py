"""tf.data service cluster: processes started and reaped, both processing modes, Python-function
loaders refused, start-up failures and a worker killed mid-epoch end with a ServiceError in bounded time.

Every test leaves no perfsuite server process of this pytest process running (checked after each
test and after the module's shared cluster is stopped).
"""

import collections
import glob
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from perfsuite.workload.service import (
    PROCESSING_MODES,
    ServiceCluster,
    ServiceError,
    distribute,
    py_function_ops,
    running_service_pids,
    with_deadline,
)

pytestmark = pytest.mark.service

KILL_BOUND_S = 20.0  # kill -> ServiceError: the survivors' rest of the epoch plus the batch timeout
BATCH_TIMEOUT_S = 4.0


def _own_servers() -> set[int]:
    return set(running_service_pids(owner_pid=os.getpid()))


def _zombie_children() -> set[int]:
    """Children of this process that exited and were never reaped."""
    zombies = set()
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as file:
                fields = file.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            zombies.add(int(stat.split("/")[2]))
    return zombies


_shared: list[ServiceCluster] = []  # the module's cluster while it runs


def _shared_pids() -> set[int]:
    return {p.pid for cluster in _shared for p in cluster.processes if p.exit_code is None}


@pytest.fixture(scope="module", autouse=True)
def no_servers_left_by_the_module():
    assert _own_servers() == set(), "perfsuite server processes were running before the module started"
    yield
    # Module fixtures are torn down in reverse order, so the shared cluster is stopped by now.
    assert _own_servers() == set()
    assert _zombie_children() == set()


@pytest.fixture(autouse=True)
def no_servers_left_by_the_test():
    yield
    leftover = _own_servers() - _shared_pids()
    assert leftover == set(), f"server processes left running: {sorted(leftover)}"
    assert _zombie_children() == set()


@pytest.fixture(scope="module")
def shared_cluster():
    """One cluster for the module: starting one costs seconds of TensorFlow imports per process."""
    with ServiceCluster(workers=2) as started:
        _shared.append(started)
        yield started
        processes = started.processes
        work_dir = started.work_dir
        _shared.remove(started)
    assert all(not os.path.exists(f"/proc/{p.pid}") for p in processes), "stopped servers not reaped"
    assert not work_dir.exists()


@pytest.fixture
def cluster(shared_cluster):
    """The shared cluster with every worker running (a fault test before may have killed one)."""
    for process in shared_cluster.exited():
        assert process.role.startswith("worker-"), f"expected only workers to die, found {process.describe()}"
        shared_cluster.restart_worker(int(process.role.split("-")[1]))
    return shared_cluster


def _loader(corpus, **overrides):
    from perfsuite.data.loaders import LoaderConfig, build_loader

    return build_loader(dataset_dir=corpus, config=LoaderConfig(**{"batch_size": 4, **overrides}))


def _ids(batches) -> list[str]:
    return [sample.decode() for batch in batches for sample in batch["id"].numpy()]


def _all_ids(corpus) -> set[str]:
    from perfsuite.data.corpus import read_metadata

    return {utt.id for utt in read_metadata(corpus)}


# ----------------------------------------------------------------------------------- the cluster


def test_cluster_runs_a_dispatcher_and_workers_as_separate_processes(cluster):
    processes = cluster.processes
    assert [p.role for p in processes] == ["dispatcher", "worker-0", "worker-1"]
    assert all(p.exit_code is None for p in processes)
    assert len({p.pid for p in processes} | {os.getpid()}) == 4
    assert len({p.port for p in processes}) == 3
    assert {p.pid for p in processes} <= _own_servers()
    assert cluster.address == f"grpc://localhost:{processes[0].port}"
    for process in processes:
        with socket.create_connection(("localhost", process.port), timeout=2):
            pass
        assert process.log_path.parent == cluster.work_dir
        assert "serving on port" in process.log_path.read_text()


def test_distributed_epoch_yields_every_sample_exactly_once(cluster, tiny_corpus):
    loader = _loader(tiny_corpus)
    batches = list(with_deadline(distribute(loader, cluster=cluster, processing_mode="distributed_epoch"),
                                 batch_timeout_s=60, cluster=cluster))
    ids = _ids(batches)
    assert collections.Counter(ids) == collections.Counter(_all_ids(tiny_corpus))
    assert len(ids) == loader.num_samples


def test_parallel_epochs_yields_every_sample_once_per_worker(cluster, tiny_corpus):
    loader = _loader(tiny_corpus)
    batches = list(with_deadline(distribute(loader, cluster=cluster, processing_mode="parallel_epochs"),
                                 batch_timeout_s=60, cluster=cluster))
    counts = collections.Counter(_ids(batches))
    assert set(counts) == _all_ids(tiny_corpus)
    assert set(counts.values()) == {2}  # two workers, each the whole epoch


def test_served_batches_have_the_local_structure_and_contents(cluster, tiny_corpus):
    import tensorflow as tf

    loader = _loader(tiny_corpus)
    served = distribute(loader, cluster=cluster, processing_mode="distributed_epoch")
    assert served.element_spec == loader.dataset.element_spec

    def by_id(batches):
        samples = {}
        for batch in batches:
            assert set(batch) == {"id", "tokens", "mel", "text_len", "mel_len"}
            for i, sample_id in enumerate(batch["id"].numpy()):
                text_len, mel_len = int(batch["text_len"][i]), int(batch["mel_len"][i])
                samples[sample_id.decode()] = (batch["tokens"][i, :text_len].numpy(),
                                               batch["mel"][i, :mel_len].numpy())
        return samples

    remote = by_id(with_deadline(served, batch_timeout_s=60, cluster=cluster))
    local = by_id(loader.dataset)
    assert remote.keys() == local.keys()
    for sample_id, (tokens, mel) in local.items():
        np.testing.assert_array_equal(remote[sample_id][0], tokens)
        np.testing.assert_allclose(remote[sample_id][1], mel, rtol=0, atol=1e-5)
    assert tf.nest.map_structure(lambda spec: spec.dtype, served.element_spec)["mel"] == tf.float32


def test_an_existing_cluster_is_used_by_address_and_not_stopped(cluster, tiny_corpus):
    with ServiceCluster.existing(cluster.address, connect_timeout_s=5) as existing:
        assert not existing.managed and existing.processes == ()
        ids = _ids(with_deadline(distribute(_loader(tiny_corpus), address=existing.address,
                                            processing_mode="distributed_epoch"), batch_timeout_s=60))
    assert sorted(ids) == sorted(_all_ids(tiny_corpus))
    assert all(p.exit_code is None for p in cluster.processes)


def test_an_unreachable_existing_cluster_is_a_service_error():
    start = time.monotonic()
    with pytest.raises(ServiceError, match="expected it to accept connections"):
        ServiceCluster.existing(f"grpc://localhost:{_unused_port()}", connect_timeout_s=1).start()
    assert time.monotonic() - start < 5


# ---------------------------------------------------------------------------- refused pipelines


@pytest.mark.parametrize("kind", ["numpy_function"])
def test_a_python_function_loader_is_refused_at_once(cluster, tiny_corpus, kind):
    loader = _loader(tiny_corpus, kind=kind)
    start = time.monotonic()
    with pytest.raises(ServiceError, match=f"found kind '{kind}'"):
        distribute(loader, cluster=cluster, processing_mode="parallel_epochs")
    # The dataset of such a loader, passed bare, is caught by the graph scan.
    with pytest.raises(ServiceError, match=r"Python-function ops \['PyFuncStateless'\]"):
        distribute(loader.dataset, cluster=cluster, processing_mode="distributed_epoch")
    assert time.monotonic() - start < 5


def test_the_graph_scan_finds_python_functions_inside_map_functions(tiny_corpus):
    import tensorflow as tf

    eager = tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda y: y + 1, [x], tf.int64))
    assert py_function_ops(eager) == ("EagerPyFunc",)
    assert py_function_ops(_loader(tiny_corpus).dataset) == ()


def test_distribute_checks_its_arguments(tiny_corpus):
    loader = _loader(tiny_corpus)
    with pytest.raises(ValueError, match="processing_mode"):
        distribute(loader, address="grpc://localhost:1", processing_mode="epochs")
    with pytest.raises(ValueError, match="exactly one of cluster= or address="):
        distribute(loader, processing_mode="parallel_epochs")
    with pytest.raises(ServiceError, match="prefetch_to_device"):
        distribute(_loader(tiny_corpus, prefetch_to_device="/cpu:0"), address="grpc://localhost:1",
                   processing_mode="parallel_epochs")


# -------------------------------------------------------------------------------- start failures


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def test_a_dispatcher_whose_port_is_taken_is_a_service_error_with_its_log():
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(ServiceError) as caught:
            ServiceCluster(workers=1, dispatcher_port=port).start()
    assert time.monotonic() - start < 15
    message = str(caught.value)
    assert "dispatcher" in message and "exited with code 1 before it was ready" in message
    assert f"expected a free port, found {port} in use" in message  # the log tail


def test_a_dispatcher_that_rejects_its_arguments_is_a_service_error():
    expected = r"(?s)exited with code 2.*unrecognized arguments: --no-such-option"
    with pytest.raises(ServiceError, match=expected):
        ServiceCluster(workers=1, extra_args={"dispatcher": ["--no-such-option"]}).start()


def test_a_cluster_not_ready_in_time_is_a_service_error_and_is_reaped(tmp_path):
    cluster = ServiceCluster(workers=1, work_dir=tmp_path, start_timeout_s=0.3)
    start = time.monotonic()
    with pytest.raises(ServiceError, match=r"expected it ready within 0.3 s, found it still starting"):
        cluster.start()
    assert time.monotonic() - start < 12  # 0.3 s, then SIGTERM and reaping
    assert cluster.processes == ()
    assert sorted(path.name for path in tmp_path.glob("*.log")) == ["dispatcher.log", "worker-0.log"]


def test_a_server_exits_when_its_owner_dies():
    # A shell starts a server with itself as owner and is then SIGKILLed: the orphaned server must go.
    script = (f"{sys.executable} -m perfsuite.workload.service dispatcher --port {_unused_port()} --owner-pid $$ & "
              "echo $!; wait")
    shell = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    with shell.stdout:
        server_pid = int(shell.stdout.readline())
    time.sleep(0.5)  # the server is importing TensorFlow; its owner watch runs already
    os.kill(shell.pid, signal.SIGKILL)
    shell.wait()
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{server_pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{server_pid}"), "the orphaned server is still running"


# ------------------------------------------------------------------------------------------ faults


def _read_and_kill(cluster, dataset, *, kill_after: int):
    """Read batches, SIGKILL worker-0 after kill_after of them; return ids, the error, times."""
    batches, error, killed_at, last_batch_at = [], None, None, None
    try:
        for batch in with_deadline(dataset, batch_timeout_s=BATCH_TIMEOUT_S, cluster=cluster):
            batches.append(batch)
            last_batch_at = time.monotonic()
            if len(batches) == kill_after:
                cluster.kill_worker(0)
                killed_at = time.monotonic()
    except ServiceError as raised:
        error = raised
    return _ids(batches), error, killed_at, last_batch_at, time.monotonic()


@pytest.mark.slow  # a cluster of its own, a worker killed and a read left to its deadline
@pytest.mark.parametrize("mode", PROCESSING_MODES)
def test_a_worker_killed_mid_epoch_ends_the_read_with_a_service_error_in_bounded_time(cluster, tiny_corpus,
                                                                                      mode):
    loader = _loader(tiny_corpus, batch_size=1)
    ids, error, killed_at, last_batch_at, ended_at = _read_and_kill(
        cluster, distribute(loader, cluster=cluster, processing_mode=mode), kill_after=3)
    assert killed_at is not None, "the epoch ended before the kill"
    (killed,) = cluster.exited()
    assert killed.role == "worker-0" and killed.exit_code == -signal.SIGKILL
    assert not os.path.exists(f"/proc/{killed.pid}")  # reaped
    # TF 2.21 never ends this read by itself; the deadline does, BATCH_TIMEOUT_S after the last batch.
    assert error is not None, f"expected a ServiceError, found the read finished with {len(ids)} samples"
    message = str(error)
    assert "worker-0" in message and "exited with code -9" in message and "read was cancelled" in message
    assert BATCH_TIMEOUT_S <= ended_at - last_batch_at < BATCH_TIMEOUT_S + 3
    assert ended_at - killed_at < KILL_BOUND_S
    counts = collections.Counter(ids)
    if mode == "parallel_epochs":
        # The surviving worker delivers its whole epoch; the killed one at most part of one.
        assert set(counts) == _all_ids(tiny_corpus)
        assert max(counts.values()) <= 2
    else:
        # The survivor takes the remaining splits; what the killed worker held is lost, none repeat.
        assert max(counts.values()) == 1
        assert len(counts) >= len(_all_ids(tiny_corpus)) // 2


@pytest.mark.slow  # a cluster of its own, a worker killed and started again
def test_a_worker_restarted_at_its_address_lets_a_distributed_epoch_finish(cluster, tiny_corpus):
    loader = _loader(tiny_corpus, batch_size=1)
    reader = iter(with_deadline(distribute(loader, cluster=cluster, processing_mode="distributed_epoch"),
                                batch_timeout_s=60, cluster=cluster))
    batches = [next(reader) for _ in range(3)]
    killed = cluster.kill_worker(0)
    restarted = cluster.restart_worker(0)
    batches += list(reader)  # ends: the restarted worker takes over the lost task
    assert (restarted.port, restarted.role) == (killed.port, killed.role) and restarted.pid != killed.pid
    assert cluster.exited() == ()
    counts = collections.Counter(_ids(batches))
    assert max(counts.values()) == 1
    assert set(counts) <= _all_ids(tiny_corpus)
    assert len(counts) >= len(_all_ids(tiny_corpus)) // 2
