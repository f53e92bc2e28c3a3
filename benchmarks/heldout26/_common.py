"""Shared pieces of the twenty-sixth held-out set: the twenty-fifth set's device, options, timer,
AdamW, encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twenty_fifth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout25" / "_common.py"))
CUDA: bool = _twenty_fifth["CUDA"]
DEVICE: str = _twenty_fifth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twenty_fifth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twenty_fifth["bf16"]
