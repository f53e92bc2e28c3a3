"""A local process pool that survives its workers: a worker that dies costs only the task it ran."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # multiprocessing is imported only when a pool starts (-j 1 never does)
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

T = TypeVar("T")
R = TypeVar("R")


def death(exitcode: int | None) -> str:
    """How a worker process ended, for a message: 'was killed by SIGKILL (...)', 'exited with status 3'."""
    if exitcode is None or exitcode >= 0:
        return f"exited with status {exitcode}" if exitcode else "exited before returning a result"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    oom = " (out of memory? the OOM killer sends it)" if -exitcode == signal.SIGKILL else ""
    return f"was killed by {name}{oom}"


def _context() -> Any:  # a multiprocessing context (BaseContext's stub lacks Process)
    """How workers start: fork while this process runs one thread (a worker is ready in
    milliseconds, with tracekit already imported), else forkserver (no thread state copied;
    tracekit.pipeline preloaded once in the server), else spawn."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(["tracekit.pipeline"])
    return ctx


def _worker_loop(conn: Connection, fn: Callable[[T], R]) -> None:
    """A pool worker: run (index, item) messages until None; send (index, ok, result or exception).
    Ctrl-C and SIGTERM are the parent's to handle (it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, item = message
        try:
            reply: tuple[int, bool, object] = (index, True, fn(item))
        except Exception as exc:
            reply = (index, False, exc if _round_trips(exc) else RuntimeError(f"{type(exc).__name__}: {exc}"))
        try:
            conn.send(reply)
        except Exception as exc:  # an unpicklable result or exception: say what it was
            conn.send((index, False, RuntimeError(f"{type(exc).__name__}: {exc}")))


def _round_trips(exc: BaseException) -> bool:
    """Whether `exc` survives pickling (an exception with a custom __init__ may not)."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    index: int | None = None  # the task it runs


def pool_tasks(fn: Callable[[T], R], items: Sequence[T], workers: int,
                on_lost: Callable[[int, str], R]) -> Iterator[tuple[int, R]]:
    """A pool of `workers` processes, one task at a time each (memory stays per-rank). A worker's
    death is seen at once (its sentinel): its task goes to `on_lost`, a fresh worker takes its place."""
    from multiprocessing.connection import wait as wait_ready

    ctx = _context()
    queue: Iterator[tuple[int, T]] = iter(enumerate(items))
    unsent: list[tuple[int, T]] = []  # a task whose worker died before it got it
    pool: list[_Worker] = []

    def start() -> _Worker:
        mine, theirs = ctx.Pipe()
        process = ctx.Process(target=_worker_loop, args=(theirs, fn), daemon=True)
        process.start()
        theirs.close()
        worker = _Worker(process, mine)
        pool.append(worker)
        return worker

    def feed(worker: _Worker) -> None:
        nxt = unsent.pop() if unsent else next(queue, None)
        if nxt is not None:
            try:
                worker.conn.send(nxt)
                worker.index = nxt[0]
            except OSError:  # it died before the task reached it: the task goes to another worker
                unsent.append(nxt)

    def replace(worker: _Worker) -> None:
        pool.remove(worker)
        worker.process.join()
        worker.conn.close()
        feed(start())

    try:
        for _ in range(workers):
            feed(start())
        while any(w.index is not None for w in pool) or unsent:
            busy = [w for w in pool if w.index is not None]
            if not busy:  # every worker died before its task arrived
                replace(pool[0])
                continue
            ready = set(wait_ready([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for w in busy:
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                reply = None
                with contextlib.suppress(EOFError, OSError):
                    reply = w.conn.recv() if w.conn.poll() else None
                dead = w.process.sentinel in ready
                if reply is not None:
                    index, ok, value = reply
                    w.index = None
                    if not ok:
                        raise value
                    yield index, value
                elif (dead or not w.process.is_alive()) and w.index is not None:
                    index, w.index = w.index, None
                    dead = True
                    w.process.join()
                    yield index, on_lost(index, death(w.process.exitcode))
                if dead:
                    replace(w)
                elif w.index is None:
                    feed(w)
    finally:
        _stop(pool)


def _stop(pool: list[_Worker]) -> None:
    """Ask idle workers to leave, end busy ones (SIGTERM, then SIGKILL), reap them all."""
    for w in pool:
        with contextlib.suppress(OSError, ValueError):
            if w.index is None:
                w.conn.send(None)
            else:
                w.process.terminate()
    deadline = time.monotonic() + 2.0
    for w in pool:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()



__all__ = ["death", "pool_tasks"]
