"""Shared pieces of the eighth held-out set: the seventh set's device, options, timer, AdamW, encoder,
training loop, attention block and bf16 autocast."""

import contextlib
import runpy
from collections.abc import Callable
from pathlib import Path

_seventh = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout7" / "_common.py"))
CUDA: bool = _seventh["CUDA"]
DEVICE: str = _seventh["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _seventh[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
bf16: Callable[[], "contextlib.AbstractContextManager[object]"] = _seventh["bf16"]
