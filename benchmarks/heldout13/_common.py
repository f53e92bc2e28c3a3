"""Shared pieces of the thirteenth held-out set: the twelfth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twelfth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout12" / "_common.py"))
CUDA: bool = _twelfth["CUDA"]
DEVICE: str = _twelfth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twelfth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twelfth["bf16"]
