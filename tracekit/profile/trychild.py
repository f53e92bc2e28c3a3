"""One `--try` run in a fresh process: apply a knob, run the script profiled or timed, write a result JSON.

    python -m tracekit.profile.trychild --mode profile|time [--knob NAME] --result R.json
        [--trace T.trace.json.gz] [--warmup N] [--active N] (--script PATH | --module NAME) -- ARGS...

The parent (`tracekit.profile.tryrun`) reads R.json: the script's exit status, whether the knob
applied (and what it changed, or why not), and in `time` mode the step boundaries (`StepClock`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError
from tracekit.profile.knobs import Applied, apply_knob
from tracekit.profile.runner import Target
from tracekit.profile.script import profile_target, run_target
from tracekit.profile.session import ProfileOptions, require_torch
from tracekit.profile.timed import TimedSession


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="python -m tracekit.profile.trychild")
    p.add_argument("--mode", choices=("profile", "time"), required=True)
    p.add_argument("--knob", default=None)
    p.add_argument("--result", required=True)
    p.add_argument("--trace", default=None)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--active", type=int, default=None)
    p.add_argument("--script", default=None)
    p.add_argument("--module", default=None)
    # the script's arguments follow the first `--` as they are (a `--` of their own included)
    cut = argv.index("--") if "--" in argv else len(argv)
    return p.parse_args(argv[:cut]), argv[cut + 1:]


def _timed(target: Target) -> tuple[int, dict[str, Any]]:
    session = TimedSession()
    session.start()
    status = run_target(target, session)
    clock = session.clock.to_dict() if session.clock is not None else {"wall_us": [], "gpu_us": []}
    return status, {"steps_marked": session.marks, "step_source": session.step_source, **clock}


def main(argv: list[str] | None = None) -> int:
    from tracekit._startup import restore

    restore()  # the script gets KeyboardInterrupt on Ctrl-C, as under python
    args, script_args = _parse(sys.argv[1:] if argv is None else argv)
    target = Target(script=args.script, module=args.module, args=tuple(script_args))
    out: dict[str, Any] = {"mode": args.mode, "knob": args.knob, "pid": os.getpid()}
    try:
        return _run(args, target, script_args, out)
    except TracekitError as exc:
        out.update(status=exc.exit_code, error=str(exc))
        _write(Path(args.result), out)
        return exc.exit_code


def _run(args: argparse.Namespace, target: Target, script_args: list[str], out: dict[str, Any]) -> int:
    torch = require_torch()
    applied = apply_knob(args.knob, torch) if args.knob else Applied(True)
    out["cuda"] = bool(torch.cuda.is_available())
    if not applied.ok:
        out.update(status=None, applied=False, reason=applied.reason, notes=[])
        _write(Path(args.result), out)
        return 0
    if args.mode == "profile":
        options = ProfileOptions(warmup=args.warmup, active=args.active)
        command = ["tracekit", "profile", *(["--try", args.knob] if args.knob else []), target.display,
                   *script_args]
        status = profile_target(target, options, output=Path(args.trace), force=True, report=False,
                                quiet=True, command=command)
    else:
        status, timing = _timed(target)
        out.update(timing)
    out.update(status=status, applied=bool(applied.notes) or not args.knob, notes=list(applied.notes),
               reason="" if applied.notes or not args.knob else applied.reason)
    _write(Path(args.result), out)
    return status


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
