"""Shared pieces of the twenty-first held-out set: the twentieth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twentieth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout20" / "_common.py"))
CUDA: bool = _twentieth["CUDA"]
DEVICE: str = _twentieth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twentieth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twentieth["bf16"]
