"""Workers that die and schedulers that cannot work: one line within seconds, the other ranks kept
with --keep-going, never a hang or a traceback (tracekit.pool, tracekit.executor)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_fuzz_corpus import closed_port, dying_workers
from test_fuzz_corpus import run_cli as cli
from tracebuilder import TraceBuilder

from tracekit import executor
from tracekit.errors import TracekitError
from tracekit.executor import check_address, run_tasks
from tracekit.pool import death

BOUND_S = 15.0  # a death or a refusal is reported within seconds, on a loaded 2-core machine


def square_or_die(x: int) -> int:
    """x*x, except 3 (SIGKILL, as the OOM killer sends), 5 (os._exit(4)) and 7 (ValueError)."""
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    if x == 5:
        os._exit(4)
    if x == 7:
        raise ValueError("seven")
    return x * x


def test_a_killed_worker_costs_its_task_only() -> None:
    start = time.perf_counter()
    out = dict(run_tasks(square_or_die, [0, 1, 2, 3, 4, 5, 6], jobs=2, on_lost=lambda i, why: why))
    assert time.perf_counter() - start < BOUND_S
    # the survivors' squares, computed by hand; the two dead tasks carry how their worker ended
    assert {i: v for i, v in out.items() if i not in (3, 5)} == {0: 0, 1: 1, 2: 4, 4: 16, 6: 36}
    assert out[3] == "was killed by SIGKILL (out of memory? the OOM killer sends it)"
    assert out[5] == "exited with status 4"


def test_a_killed_worker_stops_the_run_without_on_lost() -> None:
    start = time.perf_counter()
    with pytest.raises(TracekitError, match="task 3: the worker process was killed by SIGKILL"):
        list(run_tasks(square_or_die, [0, 1, 2, 3, 4], jobs=2))
    assert time.perf_counter() - start < BOUND_S


def test_an_exception_in_a_worker_is_raised_as_itself() -> None:
    with pytest.raises(ValueError, match="seven"):
        list(run_tasks(square_or_die, [6, 7, 8], jobs=2))


def test_death_lines() -> None:
    assert death(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert death(-signal.SIGKILL).startswith("was killed by SIGKILL (out of memory?")
    assert death(3) == "exited with status 3"
    assert death(0) == "exited before returning a result"


def _job(tmp_path: Path) -> Path:
    """rank0..rank2, each one kernel of 10, 20, 30 µs (GPU busy per rank, by construction)."""
    d = tmp_path / "job"
    d.mkdir()
    for k in range(3):
        b = TraceBuilder()
        ext = b.op("aten::mm", 0, 50)
        b.launch(5, 5, "ampere_sgemm_128x64_nn", 20, 10 * (k + 1), ext=ext)
        b.write(d / f"rank{k}.json")
    return d


# the words of the error line for each way a worker dies (test_fuzz_corpus.DEATHS)
SAID = {"sigkill": "was killed by SIGKILL", "sigsegv": "was killed by SIGSEGV", "sigterm": "was killed by SIGTERM",
        "exit": "exited with status 3"}


def worker_death_problems(command: tuple[str, ...], how: str, keep_going: bool, tmp_path: Path) -> list[str]:
    """Run `command` over a 3-rank job whose rank1 worker dies; the broken promises (shared with
    benchmarks/fuzz_corpus.py)."""
    job = _job(tmp_path)
    out_html = tmp_path / "r.html"
    args = [*command, str(job), "-j", "2", *(["--keep-going"] if keep_going else [])]
    if command[0] == "report":
        args += ["-o", str(out_html)]
    code, out, err, seconds = cli(args)
    label = f"{' '.join(command)} {how} keep_going={keep_going} (exit {code})"
    problems = []
    lines = err.strip().splitlines()
    if seconds > BOUND_S:
        problems.append(f"{label}: took {seconds:.1f} s")
    if "Traceback" in out + err:
        problems.append(f"{label}: traceback")
    said = SAID[how]
    if not keep_going:
        if code != 2 or len(lines) != 1 or "rank1.json" not in lines[0] or said not in lines[0]:
            problems.append(f"{label}: not one error line naming rank1.json and {said!r}: {err[:300]!r}")
        if out_html.exists():
            problems.append(f"{label}: wrote a report")
        return problems
    if command == ("info", "--json"):  # its warnings are in the document, not on stderr
        lines = [f"tracekit: warning: {w}" for w in json.loads(out)["warnings"]] if code == 0 else lines
    warned = [line for line in lines if "rank1.json" in line and said in line]
    if code != 0 or len(warned) != 1 or not warned[0].startswith("tracekit: warning: skipped "):
        problems.append(f"{label}: no one warning naming rank1.json and {said!r}: {err[:300]!r}")
    if command == ("info", "--json"):
        doc = json.loads(out)
        # ranks 0 and 2 remain: their kernels were 10 and 30 µs (_job)
        if doc["ranks"] != [0, 2] or doc["gpu_busy_us"] != 40.0:
            problems.append(f"{label}: ranks {doc['ranks']} busy {doc['gpu_busy_us']} (expected [0, 2], 40.0)")
    if command[0] == "report" and not out_html.read_text(encoding="utf-8").rstrip().endswith("</html>"):
        problems.append(f"{label}: no complete report")
    return problems


@pytest.mark.parametrize(("command", "how", "keep_going"), [
    (("info", "--json"), "sigkill", False), (("info", "--json"), "sigkill", True),
    (("info", "--json"), "exit", True), (("analyze", "--json"), "sigsegv", False),
    (("analyze", "--json"), "sigterm", True), (("report",), "sigkill", True), (("report",), "exit", False),
])
def test_a_dying_rank_worker_is_one_line(command: tuple[str, ...], how: str, keep_going: bool,
                                        tmp_path: Path) -> None:
    with dying_workers("rank1.json", how):
        assert worker_death_problems(command, how, keep_going, tmp_path) == []


def bad_addresses() -> dict[str, tuple[str, str]]:
    """Scheduler addresses Dask parses but cannot use here: (address, words of the one line)."""
    port = closed_port()
    return {
        "closed_port": (f"tcp://127.0.0.1:{port}", f"nothing listens on 127.0.0.1:{port}"),
        "no_scheme_closed": (f"127.0.0.1:{port}", "connection refused"),
        "port_out_of_range": ("tcp://127.0.0.1:99999", "port 99999 is out of range"),
        "port_zero": ("127.0.0.1:0", "port 0 is out of range"),
        "ws_closed": (f"ws://127.0.0.1:{port}", "connection refused"),
        "tls": (f"tls://127.0.0.1:{port}", "needs TLS certificates"),
        "wss": (f"wss://127.0.0.1:{port}", "needs TLS certificates"),
        "unknown_scheme": ("foo://127.0.0.1:1", "unknown scheme 'foo'"),
        "no_host": ("tcp://", "no host"),
        "bad_port": ("tcp://127.0.0.1:abc", "bad host:port"),
        "ipv6_unbracketed": (":::", "bad host:port"),
        "unknown_host": ("tcp://no-such-host.invalid:8786", "unknown host"),
        "inproc_elsewhere": ("inproc://192.0.2.1/1/1", "reachable only inside the Python process that started it"),
        "inproc_no_pid": ("inproc://x", "(inproc://HOST/PID/N; this is process"),
    }


@pytest.mark.parametrize("kind", sorted(bad_addresses()))
def test_scheduler_address_checked_before_work(kind: str) -> None:
    pytest.importorskip("distributed")
    address, words = bad_addresses()[kind]
    start = time.perf_counter()
    with pytest.raises(TracekitError, match=re.escape(words)):
        check_address(address)
    assert time.perf_counter() - start < 5.0


def test_an_inproc_scheduler_of_this_process_passes_the_check() -> None:
    """inproc:// names a scheduler of this process (LocalCluster(processes=False)): accepted as is."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("inproc://") and f"/{os.getpid()}/" in address
        assert check_address(address) == address


def test_ucx_without_ucx_py_is_one_line() -> None:
    pytest.importorskip("distributed")
    import importlib.util

    if importlib.util.find_spec("ucp") is not None:
        pytest.skip("ucx-py is installed here")
    with pytest.raises(TracekitError, match="ucx:// needs the ucx-py package"):
        check_address("ucx://127.0.0.1:8786")


def test_scheduler_with_no_workers_is_an_error_after_the_wait() -> None:
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        start = time.perf_counter()
        with pytest.raises(TracekitError, match=r"has no workers \(waited 1 s"):
            list(run_tasks(square_or_die, [1, 2], scheduler=cluster.scheduler_address, wait_s=1.0))
        assert 1.0 <= time.perf_counter() - start < 1.0 + BOUND_S


def test_workers_that_cannot_import_tracekit(monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("dask.distributed")
    # what the probe meets on a worker without tracekit: ModuleNotFoundError
    monkeypatch.setattr(executor, "_PROBE", "__import__('tracekit_not_installed_here')")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c, \
            pytest.raises(TracekitError, match=r"cannot import tracekit \(ModuleNotFoundError"):
        list(run_tasks(square_or_die, [1, 2], scheduler=c.scheduler_address, wait_s=5.0))


def killed_on_two(x: int) -> int:
    """What Dask raises when the workers running a task kept dying (KilledWorker), for x == 2."""
    from distributed import KilledWorker

    if x == 2:
        raise KilledWorker("square-2", SimpleNamespace(address="tcp://127.0.0.1:1"), 3)  # type: ignore[arg-type]
    return x * x


def test_dask_killed_worker_is_a_lost_task() -> None:
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        out = dict(run_tasks(killed_on_two, [1, 2, 3], scheduler=cluster.scheduler_address,
                             on_lost=lambda i, why: why))
    assert out[0] == 1 and out[2] == 9  # 1*1, 3*3
    assert out[1].startswith("on a Dask worker died (KilledWorker")


@pytest.mark.parametrize("value", ["0", "-1", "x", "nan"])
def test_scheduler_wait_must_be_seconds(value: str, tmp_path: Path) -> None:
    code, _, err, _ = cli(["info", str(_job(tmp_path)), "--scheduler-wait", value])
    assert code == 2 and "--scheduler-wait" in err and "Traceback" not in err


def test_one_file_under_several_spellings_is_one_rank(tmp_path: Path) -> None:
    """`d/rank0.json`, `d/../d/rank0.json`, a symlink and a hard link to it: one rank, its kernel
    (10 µs, _job) counted once; with rank1 and rank2 (20 and 30 µs) the busy total is 60 µs."""
    job = _job(tmp_path)
    (tmp_path / "link.json").symlink_to(job / "rank0.json")
    os.link(job / "rank0.json", tmp_path / "hard.json")
    code, out, err, _ = cli(["info", "--json", str(job), str(job / ".." / "job" / "rank0.json"),
                             str(tmp_path / "link.json"), str(tmp_path / "hard.json"), str(job / "rank0.json")])
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["ranks"], doc["gpu_busy_us"]) == ([0, 1, 2], 60.0)


def test_dask_workers_get_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers of a cluster run in their own working directories: a relative input reaches them
    absolute; local workers get it as given."""
    from tracekit.pipeline import task_path

    monkeypatch.chdir(tmp_path)
    assert task_path(Path("job") / "rank0.json", "tcp://127.0.0.1:8786") == str(tmp_path / "job" / "rank0.json")
    assert task_path(Path("job") / "rank0.json", None) == str(Path("job") / "rank0.json")


def test_a_server_that_is_not_dask_is_refused_in_seconds() -> None:
    """A port that accepts connections and says nothing (an HTTP server, a stuck process): one
    line within 5 s, not Dask's 30 s connect timeout or a hang in its handshake."""
    pytest.importorskip("distributed")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        start = time.perf_counter()
        with pytest.raises(TracekitError, match="sends no Dask handshake within 2 s"):
            check_address(f"tcp://127.0.0.1:{port}")
        assert time.perf_counter() - start < 5.0


def test_a_tcp_scheduler_passes_the_checks() -> None:
    """The handshake probe reads a real scheduler's first bytes; the run then goes through."""
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                                  dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        out = dict(run_tasks(square_or_die, [2, 4], scheduler=cluster.scheduler_address, wait_s=5.0))
    assert out == {0: 4, 1: 16}  # 2*2, 4*4
