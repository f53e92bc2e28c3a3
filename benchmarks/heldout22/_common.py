"""Shared pieces of the twenty-second held-out set: the twenty-first set's device, options, timer,
AdamW, encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twenty_first = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout21" / "_common.py"))
CUDA: bool = _twenty_first["CUDA"]
DEVICE: str = _twenty_first["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twenty_first[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twenty_first["bf16"]
