"""tracekit.executor: the same tasks in this process, on a local process pool, and on a Dask cluster."""

from __future__ import annotations

import os

import pytest

from tracekit.errors import TracekitError
from tracekit.executor import (
    SCHEDULER_ENV,
    default_jobs,
    progress_bar,
    run_tasks,
    scheduler_from_env,
)


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_in_process_when_one_job():
    seen = []
    out = dict(run_tasks(square_and_pid, [1, 2, 3], jobs=1, progress=lambda d, t: seen.append((d, t))))
    assert {i: v[0] for i, v in out.items()} == {0: 1, 1: 4, 2: 9}
    assert {v[1] for v in out.values()} == {os.getpid()}
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_process_pool_runs_elsewhere():
    items = list(range(7))
    out = dict(run_tasks(square_and_pid, items, jobs=2))
    assert sorted(out) == items and all(out[i][0] == i * i for i in items)
    assert os.getpid() not in {v[1] for v in out.values()}


def test_dask_local_cluster():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        out = dict(run_tasks(square_and_pid, [3, 4], scheduler=client))
    assert {i: v[0] for i, v in out.items()} == {0: 9, 1: 16}


def test_unreachable_scheduler_is_one_line():
    dask = pytest.importorskip("dask")
    pytest.importorskip("dask.distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(TracekitError, match=r"nothing listens on 127\.0\.0\.1:9"):
        list(run_tasks(square_and_pid, [1], scheduler="tcp://127.0.0.1:9"))


def test_scheduler_from_env(monkeypatch):
    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert scheduler_from_env(None) is None
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://h:8786")
    assert scheduler_from_env(None) == "tcp://h:8786" and scheduler_from_env("tcp://x:1") == "tcp://x:1"
    assert default_jobs() >= 1
    assert progress_bar(quiet=True) is None
