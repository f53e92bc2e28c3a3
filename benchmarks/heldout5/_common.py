"""Shared pieces of the fifth held-out set: the fourth set's device, options, timer, AdamW, encoder, training loop and attention block."""

import runpy
from pathlib import Path

_fourth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout4" / "_common.py"))
CUDA: bool = _fourth["CUDA"]
DEVICE: str = _fourth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _fourth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))
