"""Store `tracekit analyze --json` of every sample and shared trace, or compare two stored sets.

usage: python benchmarks/check_identical.py save OUT_DIR [--code DIR] [TRACE_OR_DIR ...]
       python benchmarks/check_identical.py compare BEFORE_DIR AFTER_DIR

`save` runs `analyze --json` (in one child process, with PYTHONPATH=DIR, default: this checkout)
on every trace under sample_traces/ (recursive; per-rank directories also as a whole) and
../shared/traces when present, or on the paths given, and writes one file per trace (stdout, then
the exit status and stderr) to OUT_DIR. `compare` prints the traces whose output differs and exits 1
when any does. Run `save` before a change that touches the loader or an analyzer and again after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".json", ".json.gz")

CHILD = r"""
import contextlib, io, json, sys
from pathlib import Path
from tracekit.cli import main
out_dir = Path(sys.argv[1])
for line in sys.stdin:
    key, path = json.loads(line)  # (a path may hold tabs or newlines)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["analyze", "--json", path])
        except SystemExit as exc:
            code = exc.code
    (out_dir / key).write_text(f"{out.getvalue()}\n--- exit {code}\n{err.getvalue()}")
"""


def _traces(roots: list[Path]) -> list[Path]:
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            found.append(root)
            continue
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
        found.extend(files)
        dirs = sorted({p.parent for p in files if p.parent != root and "capture_traces" not in p.parts})
        found.extend(d for d in dirs if sum(1 for q in d.iterdir() if q.name.endswith(SUFFIXES)) > 1)
    return found


def _key(path: Path) -> str:
    text = str(path.resolve())
    for base in (ROOT, ROOT.parent):
        if text.startswith(str(base) + os.sep):
            text = text[len(str(base)) + 1:]
            break
    return text.replace(os.sep, "__") + ".out"


def save(out_dir: Path, code: Path, paths: list[str]) -> int:
    roots = [Path(p).absolute() for p in paths] or [ROOT / "sample_traces", ROOT.parent / "shared" / "traces"]
    traces = _traces([r for r in roots if r.exists()])
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps([_key(p), str(p)]) + "\n" for p in traces)
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(out_dir)], input=lines, text=True, env=env,
                          cwd="/")
    print(f"{len(traces)} traces -> {out_dir}")
    return proc.returncode


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    bad = [n for n in names if not (before / n).exists() or not (after / n).exists()
           or (before / n).read_bytes() != (after / n).read_bytes()]
    for n in bad:
        print(f"differs: {n}")
    print(f"{len(names) - len(bad)} of {len(names)} outputs identical")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("out_dir", type=Path)
    s.add_argument("--code", type=Path, default=ROOT)
    s.add_argument("paths", nargs="*")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "save":
        return save(args.out_dir, args.code.resolve(), args.paths)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
