"""Shared pieces of the second held-out set: the first set's device, step marks and timer, with `--variant`."""

import argparse
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("heldout_common", Path(__file__).resolve().parent.parent / "heldout" / "_common.py")
assert _spec is not None and _spec.loader is not None
_first = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_first)
CUDA: bool = _first.CUDA
DEVICE: str = _first.DEVICE
mark_step = _first.mark_step


def options(doc: str, variants: tuple[str, ...], steps: int = 12) -> argparse.ArgumentParser:
    """The command line: `--variant NAME` (none: the baseline) and `--steps N`."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--variant", choices=variants, default=None, help="the candidate fix (default: the baseline)")
    p.add_argument("--steps", type=int, default=steps)
    return p


class StepTimer(_first.StepTimer):  # type: ignore[misc,name-defined]
    """The first set's timer; `end()` closes a step with `tracekit.step()` (which also turns the
    automatic optimizer-step marks off, so every script marks its steps the same way)."""

    def end(self) -> None:
        mark_step()
