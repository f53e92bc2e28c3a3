"""Knobs for `tracekit profile --try`: small adapters that apply one suggested change to an unedited script.

Each knob is a row of KNOBS: its name, whether it needs CUDA, what it does in one sentence, and an
`apply(torch) -> Applied` function run in the child process before the script starts. Which
suggestions a knob answers is said by the rule rows (`tracekit.suggestions.rules.Rule.knobs`). Knobs that act on "the model" find it through the optimizer: when the script creates a
`torch.optim.Optimizer`, the outermost `nn.Module`s holding that optimizer's parameters are the model
(`model_roots`); a knob then changes those modules in place (`Module.compile()`, an autocast wrapper
around `forward`), so the script's own references and the optimizer keep working.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.nn import Module
    from torch.optim import Optimizer

MAX_LOADER_WORKERS = 8  # the `dataloader` knob's num_workers: min(this, CPU cores // 2), at least 1


@dataclass
class Applied:
    """What a knob did in this process: `ok` False with `reason` when it could not apply.

    `notes` grows while the script runs (e.g. "compiled Net" when the optimizer appears); the child
    writes it into its result so the table can say what was changed.
    """

    ok: bool
    reason: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Knob:
    """One change `--try` can make without editing the script."""

    name: str
    needs_cuda: bool
    does: str  # one sentence for the README / --help
    apply: Callable[[ModuleType], Applied]  # gets the torch module


def _tf32(torch: ModuleType) -> Applied:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    return Applied(True, notes=["TF32 on for matmul and cuDNN (set_float32_matmul_precision('high'))"])


def _cudnn_benchmark(torch: ModuleType) -> Applied:
    torch.backends.cudnn.benchmark = True
    return Applied(True, notes=["torch.backends.cudnn.benchmark = True"])


def _dataloader(torch: ModuleType) -> Applied:
    cuda = bool(torch.cuda.is_available())
    workers = max(1, min(MAX_LOADER_WORKERS, (os.cpu_count() or 2) // 2))
    applied = Applied(True, reason="the script created no torch.utils.data.DataLoader")
    loader_cls = torch.utils.data.DataLoader
    original = loader_cls.__init__
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: object, *args: object, **kwargs: object) -> None:
        given = signature.bind_partial(self, *args, **kwargs).arguments
        changed = []
        if "num_workers" not in given:
            kwargs["num_workers"] = workers
            changed.append(f"num_workers={workers}")
        n = given.get("num_workers", kwargs.get("num_workers", 0))
        if "pin_memory" not in given and cuda:
            kwargs["pin_memory"] = True
            changed.append("pin_memory=True")
        if "persistent_workers" not in given and n:
            kwargs["persistent_workers"] = True
            changed.append("persistent_workers=True")
        note = ("DataLoader: " + ", ".join(changed)) if changed else "DataLoader: the script set them all"
        if note not in applied.notes:
            applied.notes.append(note)
        original(self, *args, **kwargs)

    loader_cls.__init__ = __init__
    return applied


def model_roots(params: set[int]) -> list[Module]:
    """The outermost live nn.Modules that hold any of the parameters whose ids are in `params`."""
    import torch

    module_cls = torch.nn.Module
    # type(o), not isinstance: isinstance reads __class__, which some lazy/deprecated objects warn on
    modules = [o for o in gc.get_objects() if issubclass(type(o), module_cls)]
    children = {id(c) for m in modules for c in m.children()}
    return [m for m in modules
            if id(m) not in children and any(id(p) in params for p in m.parameters())]


def on_model(applied: Applied, change: Callable[[Module], str]) -> Applied:
    """Call `change(module)` on the model's root modules when the script creates its first optimizer."""
    import torch

    optimizer_cls = torch.optim.Optimizer
    original: Callable[..., None] = optimizer_cls.__init__
    done: set[int] = set()

    @functools.wraps(original)
    def __init__(self: Optimizer, params: object, *args: object, **kwargs: object) -> None:
        original(self, params, *args, **kwargs)
        ids = {id(p) for g in self.param_groups for p in g["params"]}
        for module in model_roots(ids):
            if id(module) not in done:
                done.add(id(module))
                applied.notes.append(change(module))

    optimizer_cls.__init__ = __init__  # type: ignore[method-assign]
    applied.reason = "the script created no torch.optim optimizer: no model found to change"
    return applied


def _compile_with(mode: str | None) -> Callable[[ModuleType], Applied]:
    def apply(torch: ModuleType) -> Applied:
        def change(module: Module) -> str:
            module.compile(**({"mode": mode} if mode else {}))
            return f"torch.compile({type(module).__name__}{f', mode={mode!r}' if mode else ''})"
        return on_model(Applied(True), change)
    return apply


def _bf16(torch: ModuleType) -> Applied:
    def change(module: Module) -> str:
        forward = module.forward

        @functools.wraps(forward)
        def autocast_forward(*args: object, **kwargs: object) -> object:
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                return forward(*args, **kwargs)

        module.forward = autocast_forward
        return f"autocast(bfloat16) around {type(module).__name__}.forward"
    return on_model(Applied(True), change)


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("tf32", True,
         "TF32 tensor cores for fp32 matmuls and convolutions (allow_tf32, matmul precision 'high')", _tf32),
    Knob("bf16", True,
         "autocast to bfloat16 around the forward of the model (the modules the optimizer trains)", _bf16),
    Knob("dataloader", False,
         "DataLoader defaults num_workers=min(8, cores/2), pin_memory=True (CUDA), persistent_workers=True, "
         "where the script did not pass them", _dataloader),
    Knob("cudnn_benchmark", True,
         "torch.backends.cudnn.benchmark = True (cuDNN autotunes convolution algorithms)", _cudnn_benchmark),
    Knob("compile", False,
         "torch.compile of the model's root modules, in place (Module.compile())", _compile_with(None)),
    Knob("cudagraphs", True,
         "torch.compile(mode='reduce-overhead') of the model's root modules: CUDA graphs", _compile_with("reduce-overhead")),
)}


def parse_knobs(text: str) -> list[str]:
    """'tf32,compile' -> ['tf32', 'compile']; ValueError (one line) naming an unknown knob."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--try needs at least one knob: " + ", ".join(KNOBS))
    unknown = [n for n in names if n not in KNOBS]
    if unknown:
        raise ValueError(f"unknown knob {unknown[0]!r}; knobs: {', '.join(KNOBS)}")
    return list(dict.fromkeys(names))


def apply_knob(name: str, torch: ModuleType) -> Applied:
    """Apply KNOBS[name] in this process, or say why it cannot apply here."""
    knob = KNOBS[name]
    if knob.needs_cuda and not torch.cuda.is_available():
        return Applied(False, "needs CUDA; no CUDA device here")
    if knob.name in ("compile", "cudagraphs") and not hasattr(torch.nn.Module, "compile"):
        return Applied(False, f"this torch ({torch.__version__}) has no nn.Module.compile")
    return knob.apply(torch)
