"""Run one task per input on a local process pool (default), in this process, or on a Dask cluster."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from distributed import Client
    from distributed.deploy.cluster import Cluster

T = TypeVar("T")
R = TypeVar("R")
SCHEDULER_ENV = "TRACEKIT_SCHEDULER"
Progress = Callable[[int, int], None]  # (finished, total)
# Where tasks run: a Dask scheduler address ("tcp://host:8786"), a dask Client or cluster, or None (local)
Scheduler: TypeAlias = "str | Client | Cluster | None"


def default_jobs() -> int:
    """Worker processes by default: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def scheduler_from_env(explicit: str | None) -> str | None:
    """The Dask scheduler address: `explicit`, else $TRACEKIT_SCHEDULER, else None (local)."""
    return explicit or os.environ.get(SCHEDULER_ENV) or None


def run_tasks(fn: Callable[[T], R], items: Sequence[T], *, jobs: int | None = None,
              scheduler: Scheduler = None, progress: Progress | None = None) -> Iterator[tuple[int, R]]:
    """Yield (index, fn(items[index])) as each task finishes (not in input order).

    `scheduler`: a Dask scheduler address ("tcp://host:8786"), a dask Client or cluster object, or
    None for local work: `jobs` worker processes (default: the cores), or this process when
    `jobs` is 1 or there is one item. `fn` must be a picklable top-level function."""
    total = len(items)
    if scheduler is not None:
        source = _dask_tasks(fn, items, scheduler)
    elif total <= 1 or (jobs or default_jobs()) <= 1:
        source = ((i, fn(item)) for i, item in enumerate(items))
    else:
        source = _pool_tasks(fn, items, min(jobs or default_jobs(), total))
    for done, (index, result) in enumerate(source, start=1):
        if progress is not None:
            progress(done, total)
        yield index, result


def _context() -> BaseContext:
    """How workers start: fork while this process runs one thread (a worker is ready in
    milliseconds, with tracekit already imported), else forkserver (no thread state copied;
    tracekit.pipeline preloaded once in the server), else spawn."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["tracekit.pipeline"])
    return ctx


def _pool_tasks(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[tuple[int, R]]:
    """A process pool of `workers`."""
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        pending: dict[Future, int] = {}
        queue = iter(enumerate(items))
        for index, item in queue:  # keep at most 2 tasks per worker queued: memory stays per-rank
            pending[pool.submit(fn, item)] = index
            if len(pending) >= 2 * workers:
                break
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    index = pending.pop(fut)
                    yield index, fut.result()
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending[pool.submit(fn, nxt[1])] = nxt[0]
        finally:
            for fut in pending:
                fut.cancel()


def _dask_tasks(fn: Callable[[T], R], items: Sequence[T], scheduler: str | Client | Cluster) -> Iterator[tuple[int, R]]:
    """The same tasks on a Dask distributed cluster (workers need tracekit importable)."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise TracekitError("--scheduler needs Dask: pip install 'tracekit[dask]'") from None
    own = not isinstance(scheduler, Client)
    try:
        client = scheduler if isinstance(scheduler, Client) else Client(scheduler)
    except (OSError, TimeoutError, ValueError) as exc:
        raise TracekitError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    try:
        futures = client.map(fn, list(items), pure=False)
        index = {fut.key: i for i, fut in enumerate(futures)}
        for fut in as_completed(futures):
            yield index[fut.key], fut.result()
            fut.release()
    finally:
        if own:
            client.close()


def progress_bar(quiet: bool, label: str = "ranks") -> Progress | None:
    """A one-line 'ranks 3/16' counter on stderr, only when stderr is a terminal and not quiet."""
    if quiet or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\r\x1b[K" if done == total else ""
        sys.stderr.write(f"\r\x1b[Ktracekit: {label} {done}/{total}{end}")
        sys.stderr.flush()

    return show


__all__ = ["SCHEDULER_ENV", "Scheduler", "default_jobs", "progress_bar", "run_tasks", "scheduler_from_env"]
