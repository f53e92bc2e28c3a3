"""Runs a held-out inference script with every module put in eval mode by the script compiled with torch.compile(mode="reduce-overhead") (CUDA graphs), each output cloned: the measured answer to cuda_graphs' saving on scripts `tracekit profile --try cudagraphs` cannot change (it finds models through a torch.optim optimizer).

    python3 benchmarks/gpu/compiled_eval.py SCRIPT [script args]   (prints the script's own step-time line)
"""

import itertools
import runpy
import sys
import types

import torch

_eval = torch.nn.Module.eval


class _Cloned(torch.nn.Module):
    """The compiled module, each output cloned: a CUDA graph's output is overwritten by its next replay,
    and scripts keep one call's result while making the next (classifier-free guidance's two passes)."""

    def __init__(self, compiled: torch.nn.Module) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args: object, **kwargs: object) -> object:
        out = self.compiled(*args, **kwargs)
        return out.clone() if isinstance(out, torch.Tensor) else out


def _compiled_eval(self: torch.nn.Module) -> torch.nn.Module:
    _eval(self)
    return _Cloned(torch.compile(self, mode="reduce-overhead"))


_names = itertools.count()


def _run_path(path: str, init_globals: dict | None = None, run_name: str | None = None) -> dict:
    """runpy.run_path, the file run as a module registered in sys.modules under a name of its own: the
    held-out `_common.py` chain is loaded with run_path, and torch.compile imports a function's module
    by its `__name__` (run_path's is "<run_path>", which no import finds)."""
    mod = types.ModuleType(run_name if run_name and run_name != "__main__" else f"_compiled_eval_{next(_names)}")
    mod.__file__ = str(path)
    mod.__dict__.update(init_globals or {})
    sys.modules[mod.__name__] = mod
    with open(path) as f:
        exec(compile(f.read(), str(path), "exec"), mod.__dict__)
    return dict(mod.__dict__)


runpy.run_path = _run_path  # type: ignore[assignment]
torch.nn.Module.eval = _compiled_eval  # type: ignore[method-assign,assignment]
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, script.rsplit("/", 1)[0])
with open(script) as f:
    code = compile(f.read(), script, "exec")
main = sys.modules["__main__"]
main.__file__ = script
exec(code, main.__dict__)  # the script's classes live in __main__, where torch.compile looks them up
