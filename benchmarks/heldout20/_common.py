"""Shared pieces of the twentieth held-out set: the nineteenth set's device, options, timer, AdamW,
encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_nineteenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout19" / "_common.py"))
CUDA: bool = _nineteenth["CUDA"]
DEVICE: str = _nineteenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _nineteenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _nineteenth["bf16"]
