"""Shared pieces of the twenty-third held-out set: the twenty-second set's device, options, timer,
AdamW, encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twenty_second = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout22" / "_common.py"))
CUDA: bool = _twenty_second["CUDA"]
DEVICE: str = _twenty_second["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twenty_second[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twenty_second["bf16"]
