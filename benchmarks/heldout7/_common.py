"""Shared pieces of the seventh held-out set: the sixth set's device, options, timer, AdamW, encoder,
training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_sixth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout6" / "_common.py"))
CUDA: bool = _sixth["CUDA"]
DEVICE: str = _sixth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _sixth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _sixth["bf16"]

