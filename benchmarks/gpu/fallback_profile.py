"""Stand-in for `tracekit profile` when the real command is not usable on the device machine.

  python3 benchmarks/gpu/fallback_profile.py [--warmup N] -o OUT.trace.json.gz SCRIPT [ARGS...]

Same profiler settings as tracekit profile: torch.profiler with CPU (+CUDA) activities,
record_shapes=True, a schedule that skips the first N steps; step boundaries from the script's
`tracekit.step()` (a stand-in `tracekit` module is put in sys.modules) or from optimizer.step().
No Triton launch metadata: only the real tracekit records that.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import types

import torch
from torch.profiler import ProfilerActivity, profile, schedule


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args()
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=ns.warmup, active=10**6, repeat=1) if ns.warmup else None,
        record_shapes=True,
    )
    marked = {"explicit": False}

    def step() -> None:
        marked["explicit"] = True
        prof.step()

    def on_optimizer_step(*_: object) -> None:
        if not marked["explicit"]:
            prof.step()

    shim = types.ModuleType("tracekit")
    shim.step = step
    sys.modules["tracekit"] = shim
    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(on_optimizer_step)
    script = os.path.abspath(ns.script)
    sys.argv = [ns.script, *ns.args]
    sys.path[0] = os.path.dirname(script)
    status = 0
    prof.start()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    finally:
        prof.stop()
        hook.remove()
        prof.export_chrome_trace(ns.output)
    return status


if __name__ == "__main__":
    sys.exit(main())
