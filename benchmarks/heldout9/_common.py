"""Shared pieces of the ninth held-out set: the eighth set's device, options, timer, AdamW, encoder,
training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_eighth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout8" / "_common.py"))
CUDA: bool = _eighth["CUDA"]
DEVICE: str = _eighth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _eighth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _eighth["bf16"]
