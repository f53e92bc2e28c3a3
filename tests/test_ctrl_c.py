"""Ctrl-C at any moment of `tracekit profile`, through `python -m tracekit` and the console script:
one line (`tracekit: interrupted...`), exit 130, never a traceback; also when the signal lands
where Python cannot raise it (a weakref callback during an import) or in the interpreter's shutdown.

The moments before the first line of tracekit runs (the interpreter's own start-up: its standard
streams, its site module, runpy for -m, the console script's `import re`) are Python's: a signal there is classified
"before", not checked (benchmarks/fuzz_corpus.py counts them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
CONSOLE = Path(sys.executable).with_name("tracekit")  # the console script pip writes beside python
ENTRIES = {"module": [sys.executable, "-m", "tracekit"], "console": [str(CONSOLE)]}
SCRIPT = "import time\nprint('script running', flush=True)\nfor _ in range(100):\n    time.sleep(0.05)\n"
# the delays of the acceptance check, and "during the script's own run" (0.3 s after its first line)
DELAYS = (0.005, 0.02, 0.05, 0.1, 0.3)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _before_tracekit(err: str) -> bool:
    """Whether a traceback on stderr comes from before any tracekit code ran: the interpreter's
    own start-up (a fatal init_* error: its standard streams, then its site module), runpy locating
    `-m tracekit`, or the console script's lines above its import."""
    if "Fatal Python error: init_" in err or "Could not import runpy module" in err:
        return True
    frames = err.split("Traceback")[-1]
    return "/tracekit/" not in frames and ("<frozen runpy>" in frames or f'"{CONSOLE}"' in frames)


def ctrl_c_outcome(delay: float, tmp_path: Path, *, entry: str = "module", during_script: bool = False,
                   bare: bool = True) -> str:
    """Ctrl-C `delay` seconds into `tracekit profile s.py` (a 5 s script; with `during_script`,
    `delay` after the script printed its first line) started through ENTRIES[entry]: "ok" (one
    `tracekit: interrupted` line, no traceback, exit 130), "before" (a traceback from before any
    tracekit code, see _before_tracekit), "early" (before Python installs its handler: killed by
    SIGINT, silent, which a shell reports as 130) or what went wrong. `bare=False` passes --no-bare:
    the profiled run starts without the unprofiled timing run before it (the whole script, 5 s)."""
    (tmp_path / "s.py").write_text(SCRIPT)
    options = ["--no-report"] if bare else ["--no-report", "--no-bare"]
    proc = subprocess.Popen([*ENTRIES[entry], "profile", *options, "s.py"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if during_script:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        if first != "script running\n":
            proc.kill()
            return f"the script did not start: {first!r} {proc.communicate()[1][-600:]!r}"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    if "Traceback" in err or "Fatal Python error" in err or "Exception ignored" in err:
        return "before" if _before_tracekit(err) else f"traceback at {delay} s: {err[-1500:]!r}"
    if proc.returncode == 1 and err.strip() == "KeyboardInterrupt":
        # Python's report of an interrupt with no frame at all (no "Traceback" line): no Python code was
        # running, so the interpreter was still starting (seen once at 0.02 s on a loaded 2-core machine)
        return "before"
    if proc.returncode == -signal.SIGINT and err == "":
        return "early"
    said = [line for line in err.splitlines() if line.startswith("tracekit: interrupted")]
    if proc.returncode != 130 or len(said) != 1:
        return f"exit {proc.returncode} at {delay} s: {err[-600:]!r}"
    if during_script and not (tmp_path / "s.trace.json.gz").is_file():
        return f"no trace of what ran at {delay} s: {err[-600:]!r}"
    return "ok"


def _entry(name: str) -> str:
    if name == "console" and not CONSOLE.is_file():
        pytest.skip(f"no console script at {CONSOLE} (tracekit not pip-installed in this environment)")
    return name


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_at_a_moment_of_start_up(entry: str, delay: float, tmp_path: Path) -> None:
    outcome = ctrl_c_outcome(delay, tmp_path, entry=_entry(entry))
    if outcome == "before":
        pytest.skip("the signal came during the interpreter's own start-up, before any tracekit code")
    assert outcome in ("ok", "early")


@pytest.mark.parametrize("entry", ENTRIES)
def test_ctrl_c_during_the_script(entry: str, tmp_path: Path) -> None:
    """While the script runs: one line saying where it was, the trace of what ran written, 130. Through
    `python -m tracekit` after the unprofiled timing run (the default); through the console script
    without it (--no-bare: the same interrupted profiled run, 5 s sooner)."""
    assert ctrl_c_outcome(0.3, tmp_path, entry=_entry(entry), during_script=True, bare=entry == "module") == "ok"


def _cli_run(body: str) -> subprocess.CompletedProcess[str]:
    """`body` (defining run(args)) as the CLI's command, through main() and leave() as the console
    script calls them."""
    code = ("import atexit, os, signal, sys, time, weakref\nsys.argv[0] = '/usr/bin/tracekit'\n"
            "import tracekit.cli as cli\n" + body + "cli._run = run\ncli.leave(cli.main())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)


def test_ctrl_c_raised_inside_a_weakref_callback_is_not_lost() -> None:
    """Python prints a KeyboardInterrupt raised in a weakref callback (importlib's module locks
    have one) as "Exception ignored" and goes on: the command then ran to the end and exited 0.
    It is sent again, and the command stops with one line."""
    res = _cli_run("class Box: pass\n"
                   "def run(args):\n"
                   "    box = Box()\n"
                   "    ref = weakref.ref(box, lambda _: signal.default_int_handler(signal.SIGINT, None))\n"
                   "    del box\n"
                   "    time.sleep(5)\n"
                   "    print('not reached', ref)\n"
                   "    return 0\n")
    assert (res.returncode, res.stderr, res.stdout) == (130, "tracekit: interrupted\n", "")


def test_ctrl_c_in_the_interpreter_shutdown_is_one_line() -> None:
    """After the command finished (status 0), Ctrl-C in an atexit handler: one line and 130, not
    "Exception ignored in atexit callback" and 0; what the command printed is kept."""
    res = _cli_run("def run(args):\n"
                   "    print('command output')\n"
                   "    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5), print('no')))\n"
                   "    return 0\n")
    assert (res.returncode, res.stderr, res.stdout) == (130, "tracekit: interrupted\n", "command output\n")


def test_sigterm_raised_inside_a_weakref_callback_is_not_lost() -> None:
    res = _cli_run("from tracekit.errors import raise_terminated\nclass Box: pass\n"
                   "def run(args):\n"
                   "    box = Box()\n"
                   "    ref = weakref.ref(box, lambda _: raise_terminated(signal.SIGTERM, None))\n"
                   "    del box\n"
                   "    time.sleep(5)\n"
                   "    print('not reached', ref)\n"
                   "    return 0\n")
    assert (res.returncode, res.stderr, res.stdout) == (143, "tracekit: terminated\n", "")
