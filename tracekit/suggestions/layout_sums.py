"""Per-channel sums of 4-D activations (a convolution's bias gradient) in channels_last: how much slower torch's reduce kernel runs them than in NCHW, measured per channel count and dtype."""

from __future__ import annotations

import math

# NHWC time / NCHW time of `t.sum(dim=(0, 2, 3))` on a 16 × C × H × W tensor (~32 MiB in bf16, ~64 MiB in
# fp32), per channel count C: docs/measurements/channel_sum_layouts_h100.txt (benchmarks/gpu/
# channel_sum_layouts.py, H100 80GB HBM3, torch 2.11, 2026-12-06). Reducing over the outer dims to a
# few contiguous channels leaves torch's reduce kernel little parallelism per output: 64 channels
# run 1.8× slower in bf16 (the heldout18 EDSR pair: 1.30 → 2.52 ms per step for its 34 bias sums, 1.94×).
NHWC_CHANNEL_SUM: dict[str, tuple[tuple[int, float], ...]] = {
    "bf16": ((16, 0.85), (32, 1.06), (64, 1.77), (128, 3.39), (256, 2.15), (512, 1.37)),
    "fp16": ((16, 0.85), (32, 1.06), (64, 1.77), (128, 3.39), (256, 2.15), (512, 1.37)),  # bf16's (same bytes)
    "fp32": ((16, 1.27), (32, 1.39), (64, 2.25), (128, 3.62), (256, 2.34), (512, 1.78)),
}
SUM_OP = "aten::sum"
MIN_CHANNELS = 8  # fewer: not a convolution's channels


def nhwc_sum_factor(op: object, shapes: object, dtype: object) -> float | None:
    """NHWC / NCHW time of a kernel of `op` on `shapes` (its first input N × C × H × W) in `dtype`, from
    the measured row of the nearest channel count (log2); None when it is no per-channel sum the
    table covers."""
    table = NHWC_CHANNEL_SUM.get(str(dtype))
    if op != SUM_OP or table is None or not isinstance(shapes, (tuple, list)) or not shapes:
        return None
    first = shapes[0]
    if not isinstance(first, (tuple, list)) or len(first) != 4 or not all(isinstance(d, int) for d in first):
        return None
    channels = first[1]
    if channels < MIN_CHANNELS:
        return None
    return min(table, key=lambda row: abs(math.log2(row[0]) - math.log2(channels)))[1]
