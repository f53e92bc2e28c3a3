"""Shared pieces of the seventeenth held-out set: the sixteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_sixteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout16" / "_common.py"))
CUDA: bool = _sixteenth["CUDA"]
DEVICE: str = _sixteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _sixteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _sixteenth["bf16"]
