"""Shared pieces of the fifteenth held-out set: the fourteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_fourteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout14" / "_common.py"))
CUDA: bool = _fourteenth["CUDA"]
DEVICE: str = _fourteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _fourteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _fourteenth["bf16"]
