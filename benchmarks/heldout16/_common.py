"""Shared pieces of the sixteenth held-out set: the fifteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_fifteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout15" / "_common.py"))
CUDA: bool = _fifteenth["CUDA"]
DEVICE: str = _fifteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _fifteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _fifteenth["bf16"]
