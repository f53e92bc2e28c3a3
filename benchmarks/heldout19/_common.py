"""Shared pieces of the nineteenth held-out set: the eighteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_eighteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout18" / "_common.py"))
CUDA: bool = _eighteenth["CUDA"]
DEVICE: str = _eighteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _eighteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _eighteenth["bf16"]
