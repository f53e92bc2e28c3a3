"""Per-step values of additive step totals: what every "per step" figure of the text, report and JSON shows."""

from __future__ import annotations

from tracekit.analyzers.totals import LaunchTotals

# the LaunchTotals fields shown per step (the JSON's "per_step" keys); the idle split is the union
# over streams (every stream idle at once), so its parts add up to gpu_idle_us and never exceed the span
PER_STEP_FIELDS = ("span_us", "gpu_busy_us", "gpu_idle_us", "cpu_launch_us", "launches", "kernels", "gpu_ops",
                   "syncs", "sync_us", "short_kernels", "launch_gap_us", "gpu_gap_us", "data_wait_us",
                   "sync_wait_us", "copy_wait_us", "cpu_wait_us")


def per_step(t: LaunchTotals) -> dict[str, float] | None:
    """PER_STEP_FIELDS of `t` divided by its steps (every rank's steady steps: times summed over ranks
    and divided by all their steps), None when it has none."""
    if not t.steps:
        return None
    return {name: float(getattr(t, name)) / t.steps for name in PER_STEP_FIELDS}
