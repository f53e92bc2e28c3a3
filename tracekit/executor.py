"""Run one task per input on a local process pool (default), in this process, or on a Dask cluster."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeAlias, TypeVar

from tracekit.errors import TracekitError
from tracekit.pool import death, pool_tasks

if TYPE_CHECKING:
    from distributed import Client
    from distributed.deploy.cluster import Cluster

T = TypeVar("T")
R = TypeVar("R")
SCHEDULER_ENV = "TRACEKIT_SCHEDULER"
WAIT_ENV = "TRACEKIT_SCHEDULER_WAIT"  # seconds to wait for a scheduler's workers (default DEFAULT_WAIT_S)
DEFAULT_WAIT_S = 10.0
CONNECT_S = 2.0  # a scheduler address must accept a TCP connection (and a tcp:// one speak) within this
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
              scheduler: Scheduler = None, progress: Progress | None = None,
              on_lost: Callable[[int, str], R] | None = None,
              wait_s: float | None = None) -> Iterator[tuple[int, R]]:
    """Yield (index, fn(items[index])) as each task finishes (not in input order).

    `scheduler`: a Dask scheduler address ("tcp://host:8786"), a dask Client or cluster object, or
    None for local work: `jobs` worker processes (default: the cores), or this process when
    `jobs` is 1 or there is one item. `fn` must be a picklable top-level function.
    A worker process that dies (a signal, the OOM killer, os._exit) costs only its task:
    `on_lost(index, reason)` gives that task's result, or raises to stop the run (the other
    workers are stopped); without it the run stops with a TracekitError. A scheduler address is
    checked before any work is sent, and its workers are waited for at most `wait_s` seconds
    (default $TRACEKIT_SCHEDULER_WAIT, else 10)."""
    total = len(items)
    lost = on_lost if on_lost is not None else _stop_on_loss
    if scheduler is not None:
        source = _dask_tasks(fn, items, scheduler, lost, scheduler_wait(wait_s))
    elif total <= 1 or (jobs or default_jobs()) <= 1:
        source = ((i, fn(item)) for i, item in enumerate(items))
    else:
        source = pool_tasks(fn, items, min(jobs or default_jobs(), total), lost)
    for done, (index, result) in enumerate(source, start=1):
        if progress is not None:
            progress(done, total)
        yield index, result


def _stop_on_loss(index: int, reason: str) -> NoReturn:
    raise TracekitError(f"task {index}: the worker process {reason}")


def scheduler_wait(explicit: float | None = None) -> float:
    """Seconds to wait for a scheduler's usable workers: `explicit`, else $TRACEKIT_SCHEDULER_WAIT, else 10."""
    if explicit is not None:
        return explicit
    raw = os.environ.get(WAIT_ENV, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_WAIT_S
    except ValueError:
        raise TracekitError(f"${WAIT_ENV}={raw!r} is not a number of seconds") from None
    if not 0 < value < 1e6:
        raise TracekitError(f"${WAIT_ENV}={raw!r}: give a number of seconds above 0")
    return value


def _dask_tasks(fn: Callable[[T], R], items: Sequence[T], scheduler: str | Client | Cluster,
                on_lost: Callable[[int, str], R], wait_s: float) -> Iterator[tuple[int, R]]:
    """The same tasks on a Dask distributed cluster, once it has workers that import tracekit."""
    try:
        from dask.distributed import Client, KilledWorker
    except ImportError:
        named = f" {scheduler!r}" if isinstance(scheduler, str) else ""
        raise TracekitError(f"--scheduler{named} needs Dask: pip install 'tracekit[dask]'") from None
    own = not isinstance(scheduler, Client)
    client = scheduler if isinstance(scheduler, Client) else _connect(scheduler)
    try:
        shown = scheduler if isinstance(scheduler, str) else str(getattr(client.scheduler, "address", "the cluster"))
        _check_workers(client, shown, wait_s)
        futures = client.map(fn, list(items), pure=False)
        yield from _dask_results(client, futures, shown, on_lost, wait_s, KilledWorker)
    finally:
        if own:
            with contextlib.suppress(Exception):
                client.close(timeout=2)


def _connect(scheduler: str | Cluster) -> Client:
    """A Client of `scheduler` (an address checked first: one line for anything Dask cannot use;
    a peer that accepts the connection but never answers Dask's handshake: CONNECT_S + 2 seconds)."""
    import dask

    made: list[Client | BaseException] = []

    def make() -> None:
        try:
            with dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_S + 2:g}s"}):
                made.append(_client(scheduler))
        except BaseException as exc:
            made.append(exc)

    worker = threading.Thread(target=make, name="tracekit-dask-connect", daemon=True)
    worker.start()
    worker.join(2 * CONNECT_S + 4)  # Dask's own timeout does not bound every handshake
    if not made:
        raise TracekitError(f"cannot reach the Dask scheduler {scheduler}: no Dask handshake within "
                            f"{2 * CONNECT_S + 4:g} s")
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def _client(scheduler: str | Cluster) -> Client:
    from dask.distributed import Client

    if not isinstance(scheduler, str):  # a cluster object
        try:
            return Client(scheduler, timeout=CONNECT_S + 2)
        except Exception as exc:
            raise TracekitError(f"cannot connect to the Dask cluster {scheduler!r}: {_why(exc)}") from None
    address = check_address(scheduler)
    try:
        return Client(address, timeout=CONNECT_S + 2)
    except Exception as exc:  # timeouts, refused handshakes, TLS errors: never a traceback
        raise TracekitError(f"cannot reach the Dask scheduler {scheduler}: {_why(exc)}") from None


def check_address(address: str) -> str:
    """`address` as Dask will dial it (scheme://host:port), or TracekitError in one line, within
    CONNECT_S seconds: unknown scheme, bad or out-of-range port, unknown host, nothing listening,
    TLS without certificates, UCX without ucx-py."""
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port, unparse_host_port

    where = f"--scheduler {address!r}"
    try:
        scheme, loc = parse_address(address.strip(), strict=False)
    except (ValueError, TypeError) as exc:
        raise TracekitError(f"{where}: not a Dask address ({exc}); e.g. tcp://host:8786") from None
    if scheme not in registry.backends:
        known = ", ".join(f"{k}://" for k in sorted(registry.backends))
        raise TracekitError(f"{where}: unknown scheme {scheme!r} (Dask knows {known})")
    if scheme == "inproc":  # a scheduler in this very process (LocalCluster(processes=False))
        parts = loc.split("/")  # HOST/PID/N, as distributed's inproc transport names it
        if len(parts) != 3 or parts[1] != str(os.getpid()):
            raise TracekitError(f"{where}: an inproc:// scheduler is reachable only inside the Python process "
                                f"that started it (inproc://HOST/PID/N; this is process {os.getpid()}); "
                                "give its tcp:// address")
        return f"inproc://{loc}"
    if scheme == "ucx":
        import importlib.util

        if importlib.util.find_spec("ucp") is None:
            raise TracekitError(f"{where}: ucx:// needs the ucx-py package on this machine; or use tcp://")
    if scheme in ("tls", "wss"):
        from distributed.security import Security

        if Security().get_connection_args("client").get("ssl_context") is None:
            raise TracekitError(f"{where}: {scheme}:// needs TLS certificates in the Dask configuration "
                                "(distributed.comm.tls.ca-file, .client.cert, .client.key)")
    try:
        host, port = parse_host_port(loc, 8786)
    except (ValueError, TypeError) as exc:
        raise TracekitError(f"{where}: bad host:port ({exc})") from None
    if not 0 < int(port) < 65536:
        raise TracekitError(f"{where}: port {port} is out of range (1-65535)")
    if not host:
        raise TracekitError(f"{where}: no host")
    if scheme != "ucx":
        _dial(where, host, int(port), handshake=scheme == "tcp")
    return f"{scheme}://{unparse_host_port(host, port)}"


def _dial(where: str, host: str, port: int, *, handshake: bool) -> None:
    """One TCP connection to host:port within CONNECT_S seconds, else TracekitError saying why.
    With `handshake` (plain tcp://), the peer must also speak first within CONNECT_S, as a Dask
    scheduler does (its handshake message): a silent server (HTTP, anything else) is refused."""
    import socket  # only to check a scheduler's address

    try:
        with socket.create_connection((host, port), timeout=CONNECT_S) as conn:
            if handshake:
                try:
                    first = conn.recv(1)
                except TimeoutError:
                    raise TracekitError(f"{where}: {host}:{port} accepts connections but sends no Dask "
                                        f"handshake within {CONNECT_S:g} s (not a Dask scheduler?)") from None
                if not first:
                    raise TracekitError(f"{where}: {host}:{port} closed the connection at once "
                                        "(not a Dask scheduler?)")
    except socket.gaierror as exc:
        raise TracekitError(f"{where}: unknown host {host!r} ({exc.strerror or exc})") from None
    except TimeoutError:
        raise TracekitError(f"{where}: no answer from {host}:{port} within {CONNECT_S:g} s") from None
    except ConnectionRefusedError:
        raise TracekitError(f"{where}: nothing listens on {host}:{port} (connection refused)") from None
    except (OSError, OverflowError, ValueError) as exc:
        raise TracekitError(f"{where}: cannot connect to {host}:{port} ({_why(exc)})") from None


def _why(exc: BaseException) -> str:
    try:
        text = " ".join(str(exc).split())[:300]
    except Exception:  # an exception whose str() fails (KilledWorker without its worker)
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# Run on every worker: imports what the tasks need, returns tracekit's version (a builtin function
# and a string pickle on a worker that lacks tracekit, unlike a function of this module).
_PROBE = "__import__('tracekit.pipeline').__version__"


def _check_workers(client: Client, shown: str, wait_s: float) -> None:
    """TracekitError after at most `wait_s` seconds unless the scheduler has workers and every one
    of them imports tracekit."""
    from dask.distributed import wait

    try:
        client.wait_for_workers(1, timeout=wait_s)
    except TimeoutError:
        raise TracekitError(f"the Dask scheduler {shown} has no workers (waited {wait_s:g} s; "
                            f"--scheduler-wait or ${WAIT_ENV} sets the wait); start some with: dask worker {shown}") from None
    except Exception as exc:
        raise TracekitError(f"the Dask scheduler {shown}: {_why(exc)}") from None
    try:
        workers = list(client.nthreads())
        probes = {w: client.submit(eval, _PROBE, workers=[w], pure=False, allow_other_workers=False)
                  for w in workers}
        wait(list(probes.values()), timeout=wait_s)
    except TimeoutError:
        raise TracekitError(f"the Dask workers of {shown} did not import tracekit within {wait_s:g} s "
                            f"(--scheduler-wait or ${WAIT_ENV} sets the wait)") from None
    except Exception as exc:
        raise TracekitError(f"the Dask scheduler {shown}: {_why(exc)}") from None
    for worker, fut in probes.items():
        error = fut.exception() if fut.status == "error" else None
        if error is not None:
            raise TracekitError(f"the Dask worker {worker} of {shown} cannot import tracekit ({_why(error)}); "
                                "install tracekit where the workers run")


def _dask_results(client: Client, futures: list, shown: str, on_lost: Callable[[int, str], R],
                  wait_s: float, killed: type[Exception]) -> Iterator[tuple[int, R]]:
    """(index, result) as the futures finish; a task whose workers died goes to `on_lost`; a
    scheduler that has had no worker for `wait_s` seconds stops the run."""
    from dask.distributed import wait

    index = {fut.key: i for i, fut in enumerate(futures)}
    pending = set(futures)
    idle_since: float | None = None
    while pending:
        try:
            done = set(wait(list(pending), timeout=1.0, return_when="FIRST_COMPLETED").done)
        except TimeoutError:  # none finished within the second: check that workers are left
            done = set()
        pending -= done
        for fut in done:
            i = index[fut.key]
            if fut.status == "error":
                error = fut.exception()
                if isinstance(error, killed):
                    yield i, on_lost(i, f"on a Dask worker died ({_why(error)})")
                    continue
                raise error
            yield i, fut.result()
            fut.release()
        if not done:
            workers = len(client.nthreads())
            idle_since = None if workers else (idle_since or time.monotonic())
            if idle_since is not None and time.monotonic() - idle_since > wait_s:
                raise TracekitError(f"the Dask scheduler {shown} lost all its workers "
                                    f"({len(pending)} tasks left; waited {wait_s:g} s)")

def progress_bar(quiet: bool, label: str = "ranks") -> Progress | None:
    """A one-line 'ranks 3/16' counter on stderr, only when stderr is a terminal and not quiet."""
    if quiet or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\r\x1b[K" if done == total else ""
        sys.stderr.write(f"\r\x1b[Ktracekit: {label} {done}/{total}{end}")
        sys.stderr.flush()

    return show


__all__ = ["DEFAULT_WAIT_S", "SCHEDULER_ENV", "WAIT_ENV", "Scheduler", "check_address", "death", "default_jobs",
           "progress_bar", "run_tasks", "scheduler_from_env", "scheduler_wait"]  # death: tracekit.pool
