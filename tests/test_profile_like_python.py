"""`tracekit profile SCRIPT` behaves like `python SCRIPT`: sys.argv as typed, the script's own exit
status through forks, a closed fd 2 and os._exit, and Ctrl-C at start-up as one line (exit 130;
tests/test_ctrl_c.py interrupts it at many moments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
ARGV = "import json, sys\nprint(json.dumps({'argv': sys.argv, 'file': __file__}))\n"
# name -> (script, exit status `python SCRIPT` ends with, lines its stdout must hold)
SCRIPTS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    # the child runs to the end of the script (status 0) while the parent waits for it, then exits 7
    "fork_child_returns": (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('child done', flush=True)\n"
        "else:\n"
        "    _, status = os.waitpid(pid, 0)\n"
        "    print('parent saw', os.waitstatus_to_exitcode(status), flush=True)\n"
        "    sys.exit(7)\n", 7, ("child done", "parent saw 0")),
    # the child leaves with sys.exit(5): its status reaches the parent, tracekit's epilogue does not run
    "fork_child_exits": (
        "import os, sys\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    sys.exit(5)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('parent saw', os.waitstatus_to_exitcode(status), flush=True)\n", 0, ("parent saw 5",)),
    "closes_fd_2": ("import os, sys\nprint('closing', flush=True)\nos.close(2)\nsys.exit(3)\n", 3, ("closing",)),
    "os_exit": ("import os\nprint('bye', flush=True)\nos._exit(5)\n", 5, ("bye",)),
}
BARE = {"fork_child_returns"}  # also run once unprofiled (the forked child there leaves the same way)
# One interpreter profiles every script in turn (torch imported once): each status is printed as
# a JSON line; os_exit comes last, as the process's own exit status.
HARNESS = """
import json, os, sys
from tracekit.cli import main
for name, bare in json.loads(sys.argv[1]):
    os.chdir(name)
    try:
        code = main(["profile", "--no-report", *([] if bare else ["--no-bare"]), "s.py"])
    except SystemExit as exc:
        code = exc.code
    os.chdir("..")
    print(json.dumps({"case": name, "status": code}), flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def test_scripts_end_as_under_python(tmp_path: Path) -> None:
    """Every script under `tracekit profile` and under python: the same status and output."""
    assert script_problems(tmp_path) == []


def script_problems(tmp_path: Path) -> list[str]:
    """SCRIPTS under `tracekit profile` (one interpreter) and under python; the broken promises
    (shared with benchmarks/fuzz_corpus.py)."""
    order = [name for name in SCRIPTS if name != "os_exit"] + ["os_exit"]
    for name, (source, _, _) in SCRIPTS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "s.py").write_text(source)
    ours = subprocess.run([sys.executable, "-c", HARNESS, json.dumps([[n, n in BARE] for n in order])],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    statuses = {d["case"]: d["status"] for d in map(json.loads, (x for x in ours.stdout.splitlines()
                                                                  if x.startswith('{"case"')))}
    statuses["os_exit"] = ours.returncode  # the last script ends the process itself
    problems = []
    for name, (_, status, lines) in SCRIPTS.items():
        python = subprocess.run([sys.executable, "s.py"], cwd=tmp_path / name, capture_output=True, text=True,
                                timeout=60)
        for label, code, out in (("python", python.returncode, python.stdout),
                                 ("tracekit profile", statuses.get(name), ours.stdout)):
            if code != status:
                problems.append(f"{name} under {label}: exit {code}, expected {status}")
            if not all(line in out.splitlines() for line in lines):
                problems.append(f"{name} under {label}: stdout lacks {lines}: {out[-300:]!r}")
        if name != "os_exit" and not (tmp_path / name / "s.trace.json.gz").is_file():  # os._exit skips it
            problems.append(f"{name}: no trace written")
    if "Traceback" in ours.stderr:
        problems.append(f"traceback: {ours.stderr[-1000:]!r}")
    return problems


@pytest.mark.parametrize("typed", ["argv_script.py", "./argv_script.py"])
def test_argv_as_typed(typed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture) -> None:
    from tracekit.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "argv_script.py").write_text(ARGV)
    assert main(["profile", "--no-report", "--no-bare", "-q", typed, "a", "--b"]) == 0
    seen = json.loads(capsys.readouterr().out.splitlines()[-1])
    # what `python ./argv_script.py a --b` prints: argv[0] as typed, __file__ absolute (Python >= 3.9)
    assert seen == {"argv": [typed, "a", "--b"], "file": str(tmp_path / "argv_script.py")}


def test_ctrl_c_during_the_cli_imports_is_one_line() -> None:
    """The console script's start-up, interrupted once tracekit's first line has run and before
    the CLI module is imported: one line, 130 (deterministic: the signal is sent from inside)."""
    code = ("import os, signal, sys\nsys.argv[0] = '/usr/bin/tracekit'\nimport tracekit\n"
            "os.kill(os.getpid(), signal.SIGINT)\nimport tracekit.cli\nprint('not reached')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert (res.returncode, res.stderr, res.stdout) == (130, "tracekit: interrupted\n", "")


def test_importing_tracekit_as_a_library_keeps_keyboard_interrupt() -> None:
    code = "import signal, tracekit\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert res.stdout.strip() == "True", res.stderr


def test_a_child_forked_inside_profile_run_leaves_the_block_untouched(tmp_path: Path) -> None:
    """`with tracekit.profile_run():` around os.fork(): the child leaves the block without stopping
    the profiler or writing the trace (the parent's), and goes on as the caller's code."""
    # the parent waits for the child inside the block: a trace the child finds was the child's own
    code = ("import os, sys, tracekit\n"
            "with tracekit.profile_run('t.json.gz', report=False):\n"
            "    pid = os.fork()\n"
            "    if pid:\n"
            "        _, status = os.waitpid(pid, 0)\n"
            "if pid == 0:\n"
            "    print('child after the block; trace there:', os.path.exists('t.json.gz'), flush=True)\n"
            "    os._exit(9)\n"
            "print('parent saw', os.waitstatus_to_exitcode(status), flush=True)\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-1000:]
    assert res.stdout.splitlines() == ["child after the block; trace there: False", "parent saw 9"]
    assert (tmp_path / "t.json.gz").is_file()
