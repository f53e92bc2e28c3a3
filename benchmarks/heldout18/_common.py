"""Shared pieces of the eighteenth held-out set: the seventeenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_seventeenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout17" / "_common.py"))
CUDA: bool = _seventeenth["CUDA"]
DEVICE: str = _seventeenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _seventeenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _seventeenth["bf16"]
