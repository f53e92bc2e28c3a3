"""Shared pieces of the twelfth held-out set: the tenth set's device, options, timer, AdamW, encoder,
training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_tenth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout10" / "_common.py"))
CUDA: bool = _tenth["CUDA"]
DEVICE: str = _tenth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _tenth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _tenth["bf16"]
