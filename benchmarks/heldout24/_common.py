"""Shared pieces of the twenty-fourth held-out set: the twenty-third set's device, options, timer,
AdamW, encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twenty_third = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout23" / "_common.py"))
CUDA: bool = _twenty_third["CUDA"]
DEVICE: str = _twenty_third["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twenty_third[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twenty_third["bf16"]
