"""Colours for kernel classes, verdicts and critical-path kinds, as data: one restrained palette shared by every chart."""

from __future__ import annotations

# kernel class -> colour; classes not listed use OTHER
CLASS_COLORS: dict[str, str] = {
    "gemm": "#3b6fb6",
    "attention": "#7b5ea7",
    "conv": "#2f8f9d",
    "elementwise": "#e0913a",
    "reduction": "#c4643b",
    "normalization": "#d4b13f",
    "softmax": "#b0508f",
    "embedding": "#6c9a46",
    "copy": "#8a8f98",
    "memcpy": "#a3a8b0",
    "memset": "#c2c6cc",
    "communication": "#3a9a6a",
    "sleep": "#d9d3e6",  # a pale lilac: busy but idle-like, apart from the greys of copies and `other`
    "other": "#b8bcc4",
}
OTHER = CLASS_COLORS["other"]

# verdict -> (css modifier, short label)
VERDICTS: dict[str, tuple[str, str]] = {
    "launch-bound": ("warn", "Launch-bound"),
    "host-bound": ("warn", "Host-bound"),
    "communication-bound": ("warn", "Communication-bound"),
    "gpu-bound": ("ok", "GPU-bound"),
    "mixed": ("mixed", "Mixed"),
    "cpu-only": ("neutral", "CPU-only"),
    "undetermined": ("neutral", "Undetermined"),
}


# cause of a host-bound or mixed verdict -> words after the label
CAUSE_LABELS: dict[str, str] = {
    "launch": "kernel launches",
    "data_loading": "data loading",
    "sync": "host syncs",
    "copies": "pageable copies",
    "cpu_work": "CPU work",
    "communication": "communication",
    "unexplained": "unexplained GPU idle",
}


def class_color(cls: object) -> str:
    """The colour of a kernel class (OTHER for unknown classes)."""
    return CLASS_COLORS.get(str(cls or "other"), OTHER)


# critical-path segment kind (tracekit.model.critical) -> colour of the timeline's band
PATH_COLORS: dict[str, str] = {
    "cpu": "#d66a5e",
    "launch": "#e0913a",
    "sync": "#7b5ea7",
    "gpu": "#3b6fb6",
}
