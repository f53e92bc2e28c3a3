"""Shared pieces of the fourteenth held-out set: the thirteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_thirteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout13" / "_common.py"))
CUDA: bool = _thirteenth["CUDA"]
DEVICE: str = _thirteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _thirteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _thirteenth["bf16"]
