"""Shared pieces of the tenth held-out set: the ninth set's device, options, timer, AdamW, encoder,
training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_ninth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout9" / "_common.py"))
CUDA: bool = _ninth["CUDA"]
DEVICE: str = _ninth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _ninth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _ninth["bf16"]
