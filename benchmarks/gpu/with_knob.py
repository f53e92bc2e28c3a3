"""Run a held-out script with one change a suggestion names, made from outside the script.

    python3 benchmarks/gpu/with_knob.py KNOB SCRIPT [ARGS...]   (from the script's folder or anywhere)

KNOB: `no_cudnn_sdpa` (torch.backends.cuda.enable_cudnn_sdp(False): SDPA picks flash or
memory-efficient attention, attention_plans' first alternative), `reduce_overhead`
(torch.compile's default mode becomes "reduce-overhead": a compiled model's step replays CUDA graphs,
cuda_graphs' change, for scripts that call torch.compile(model) without a mode). The held-out scripts
stay as written (their labels were fixed before the first run); this measures the change tracekit
suggested first where it differs from the labelled one.
"""

import functools
import runpy
import sys
from pathlib import Path

import torch

knob, script, *rest = sys.argv[1:]
if knob == "no_cudnn_sdpa":
    torch.backends.cuda.enable_cudnn_sdp(False)
elif knob == "reduce_overhead":
    compile_ = torch.compile

    @functools.wraps(compile_)
    def compile_reduce_overhead(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("mode", "reduce-overhead")
        return compile_(*args, **kwargs)

    torch.compile = compile_reduce_overhead
else:
    raise SystemExit(f"with_knob.py: unknown knob {knob!r} (no_cudnn_sdpa, reduce_overhead)")
path = Path(script).resolve()
sys.path.insert(0, str(path.parent))
sys.argv = [str(path), *rest]
runpy.run_path(str(path), run_name="__main__")
