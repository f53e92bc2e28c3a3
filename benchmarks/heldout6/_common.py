"""Shared pieces of the sixth held-out set: the fifth set's device, options, timer, AdamW, encoder, training loop and attention block, and bf16 autocast."""

import contextlib
import runpy
from pathlib import Path

import torch

_fifth = runpy.run_path(str(Path(__file__).resolve().parent.parent / "heldout5" / "_common.py"))
CUDA: bool = _fifth["CUDA"]
DEVICE: str = _fifth["DEVICE"]
options, StepTimer, adamw, train, encoder, AttnBlock = (
    _fifth[k] for k in ("options", "StepTimer", "adamw", "train", "encoder", "AttnBlock"))


def bf16() -> "contextlib.AbstractContextManager[object]":
    """bf16 autocast on CUDA; nothing on the CPU (the tiny CPU check runs in float32)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if CUDA else contextlib.nullcontext()
