"""Shared pieces of the twenty-fifth held-out set: the twenty-fourth set's device, options, timer,
AdamW, encoder, training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_twenty_fourth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout24" / "_common.py"))
CUDA: bool = _twenty_fourth["CUDA"]
DEVICE: str = _twenty_fourth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _twenty_fourth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _twenty_fourth["bf16"]
