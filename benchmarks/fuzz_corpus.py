"""Run the whole bad-input corpus, a long hypothesis run and a gzip bomb; print the counts.

usage: python benchmarks/fuzz_corpus.py [--every N] [--only PREFIX] [--examples N] [--bomb-gb G] [--skip-corpus]
                                        [--profile-delays N] [--scaling N]

The corpus and the checks are those of tests/test_fuzz_corpus.py (CI runs a share of them);
hypothesis mutates the sample traces as tests/test_fuzz_hypothesis.py does, with --examples
examples; --only io: runs the input/output cases alone (outputs onto any input, /dev/null and
FIFOs, inputs spelled several ways, hostile file names through every command). The bomb is a gzip
of G GB of JSON string (a few MB on disk), refused by `tracekit info` in a fresh process; its wall
time and the child's peak RSS are printed. The corpus holds the dying-worker and bad --scheduler
cases; `tracekit profile` is checked against python on the scripts of
tests/test_profile_like_python.py (forks, closed fd 2, os._exit) and interrupted with Ctrl-C
(tests/test_ctrl_c.py), through `python -m tracekit` and the console script, at the delays of that
test, at N moments from 10 ms to 4 s into its run and twice during the script's own run.
--scaling N runs the adversarial shapes of tests/test_fuzz_scaling.py (tests/scaling_shapes.py) at N
times CI's sizes and at ten times that, and prints each one's time ratio and the growth of resident
memory (peak RSS over the run's baseline) against the raw input, also per byte added.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
# `tracekit ARGS` in a fresh process that prints its own peak RSS (KiB) as the last stderr line
CHILD = """
import resource, sys
from tracekit.cli import main
try:
    code = main(sys.argv[1:])
finally:
    use = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write(f"{use.ru_maxrss} {use.ru_utime + use.ru_stime:.2f}\\n")
sys.exit(code)
"""


def run_corpus(every: int, only: str = "") -> None:
    from test_fuzz_corpus import COMMANDS, check_case, corpus

    cases = [c for c in corpus() if c.name.startswith(only)][::every]
    kinds: collections.Counter[str] = collections.Counter()
    problems: list[str] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            found = check_case(case, Path(tmp))
            problems += found
            for p in found:
                kinds[p.split(": ", 1)[1].split(" ", 1)[0] if ": " in p else "?"] += 1
    runs = sum(len(c.commands) for c in cases)
    print(f"corpus: {len(cases)} cases, {runs} command runs in {time.perf_counter() - start:.0f} s; "
          f"{len(problems)} problems; tracebacks {sum('raised' in p or 'traceback' in p for p in problems)}")
    for p in problems[:30]:
        print("  ", p[:300])
    print(f"  ({len(COMMANDS)} commands per case except the output: and io: cases)")


def run_hypothesis(examples: int) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from test_fuzz_hypothesis import MUTATION, SAMPLES, check_mutation

    seen = {"examples": 0, "problems": 0}
    failures: list[str] = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(sample=st.sampled_from(SAMPLES), mutations=st.lists(MUTATION, min_size=1, max_size=8))
    def body(sample: str, mutations: list) -> None:
        seen["examples"] += 1
        found = check_mutation(sample, mutations)
        if found:
            seen["problems"] += len(found)
            failures.extend(found)

    start = time.perf_counter()
    body()
    print(f"hypothesis: {seen['examples']} mutated sample traces in {time.perf_counter() - start:.0f} s; "
          f"{seen['problems']} problems")
    for p in failures[:20]:
        print("  ", p[:300])


def run_profile(delays: int) -> None:
    from test_ctrl_c import CONSOLE, DELAYS, ENTRIES, ctrl_c_outcome
    from test_profile_like_python import SCRIPTS, script_problems

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        problems = script_problems(Path(tmp))
    print(f"profile like python: {len(SCRIPTS)} scripts in {time.perf_counter() - start:.0f} s; "
          f"{len(problems)} problems")
    for p in problems:
        print("  ", p[:300])
    spread = [0.01 * (400 ** (k / max(1, delays - 1))) for k in range(delays)]  # 10 ms .. 4 s, log scale
    moments = [(d, False) for d in sorted({*DELAYS, *spread})] + [(0.3, True), (1.5, True)]
    for entry in ENTRIES:
        if entry == "console" and not CONSOLE.is_file():
            print(f"profile Ctrl-C through the console script: skipped (no {CONSOLE})")
            continue
        outcomes: dict[str, list[str]] = collections.defaultdict(list)
        for delay, during in moments:
            with tempfile.TemporaryDirectory() as tmp:
                outcome = ctrl_c_outcome(delay, Path(tmp), entry=entry, during_script=during)
            moment = f"{delay * 1000:.0f} ms{' into the script' if during else ''}"
            outcomes[outcome if outcome in ("ok", "before", "early") else "problem"].append(moment)
            if outcome not in ("ok", "before", "early"):
                print("  ", outcome[:300])
        shown = {k: (len(v) if k == "ok" else v) for k, v in outcomes.items()}
        print(f"profile Ctrl-C through {entry} at {len(moments)} moments (2 of them during the script): "
              f"{shown} (before: a traceback from the interpreter's own start-up, before any "
              "tracekit code; early: before Python's handler, killed by SIGINT silently)")


def make_bomb(path: Path, gigabytes: float) -> None:
    """{"traceEvents": [{"name": "AAAA... (G GB)"}]} gzipped, written without holding it in memory."""
    total = int(gigabytes * (1 << 30))
    block = b"A" * (1 << 24)
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": "')
        left = total
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
        fh.write(b'"}]}')


def run_bomb(gigabytes: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bomb = Path(tmp) / "bomb.json.gz"
        make_bomb(bomb, gigabytes)
        lie = Path(tmp) / "trailer_lie.json.gz"
        data = bomb.read_bytes()
        lie.write_bytes(data[:-4] + (0xFFFFFFFF).to_bytes(4, "little"))  # claims 4 GiB
        for label, path, extra in (("bomb", bomb, []), ("bomb, trailer claims 4 GiB", lie, []),
                                   ("bomb, --max-trace-bytes 1G", bomb, ["--max-trace-bytes", "1G"])):
            start = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", CHILD, "info", str(path), *extra],
                                 capture_output=True, text=True)
            wall = time.perf_counter() - start
            *lines, last = res.stderr.strip().splitlines()
            peak, cpu = last.split()
            print(f"{label}: {path.stat().st_size / 1e6:.1f} MB gzip of {gigabytes:g} GB: exit {res.returncode} "
                  f"in {wall:.2f} s wall ({cpu} s CPU), peak RSS {int(peak) / 1024:.0f} MB; {' '.join(lines)[:170]}")


def run_scaling(scale: int) -> None:
    from scaling_shapes import SHAPES, measure
    from test_fuzz_scaling import marginal_memory

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(SHAPES, Path(tmp), scale=scale, memory=frozenset(s.name for s in SHAPES))
    print(f"scaling: {len(SHAPES)} shapes at {scale}x CI's sizes and 10x that, {time.perf_counter() - start:.0f} s")
    for shape in SHAPES:
        m = got[shape.name]
        print(f"  {shape.name:22s} n={shape.small * scale:>9,}: {m['small']:6.2f} s -> {m['large']:7.2f} s "
              f"({m['large'] / max(m['small'], 0.01):5.1f}x); RSS +{m['peak_small'] / 1e6:.1f} MB -> "
              f"+{m['peak'] / 1e6:.1f} MB = {m['peak'] / m['raw_bytes']:4.1f}x the raw {m['raw_bytes'] / 1e6:.1f} MB, "
              f"{marginal_memory(m):4.1f}x per byte added")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=1, help="run every Nth corpus case (default all)")
    ap.add_argument("--examples", type=int, default=2000, help="hypothesis examples (default 2000)")
    ap.add_argument("--bomb-gb", type=float, default=2.0, help="inflated size of the gzip bomb")
    ap.add_argument("--only", default="", metavar="PREFIX", help="only the corpus cases named PREFIX... (io:, file:)")
    ap.add_argument("--skip-corpus", action="store_true")
    ap.add_argument("--profile-delays", type=int, default=12, help="Ctrl-C moments for tracekit profile (0: skip)")
    ap.add_argument("--scaling", type=int, default=0, help="run the scaling shapes at N times CI's sizes")
    args = ap.parse_args()
    if args.bomb_gb > 0:
        run_bomb(args.bomb_gb)  # first: the children's peak RSS is the bomb's own
    if not args.skip_corpus:
        run_corpus(args.every, args.only)
    if args.examples > 0:
        run_hypothesis(args.examples)
    if args.profile_delays > 0:
        run_profile(args.profile_delays)
    if args.scaling > 0:
        run_scaling(args.scaling)


if __name__ == "__main__":
    main()
