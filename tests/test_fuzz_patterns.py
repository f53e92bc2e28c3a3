"""Every regex of the package runs in time linear in the (untrusted) name it searches.

Patterns are gathered from the pattern tables (kernel_patterns rules, names and ops) and from every
compiled regex a tracekit module holds at module level. Each is searched in adversarial names built
from its own literal fragments (repeated fragments, fragment + a long run of '_' or digits, then a
character that makes the match fail), the shapes that made the old rules backtrack for hours."""

from __future__ import annotations

import importlib
import pkgutil
import re
import time
from collections.abc import Iterator

import pytest

import tracekit
from tracekit.analyzers import kernel_patterns as kp
from tracekit.analyzers.kernels import classify_name

N = 20_000  # characters of each adversarial name
SECONDS_PER_CHAR = 10e-6  # linear bound: 0.2 s for a 20,000-character name (the old rules: 12 s to hours)
SKIP_MODULES = ("tracekit.profile", "tracekit.hta_compat", "tracekit.__main__")


def _collect(obj: object, where: str, out: dict, depth: int = 0) -> None:
    if isinstance(obj, re.Pattern):
        out.setdefault((obj.pattern, obj.flags), where)
    elif isinstance(obj, (tuple, list)) and depth < 3:
        for i, x in enumerate(obj):
            _collect(x, f"{where}[{i}]", out, depth + 1)
    elif isinstance(obj, dict) and depth < 3:
        for k, x in obj.items():
            _collect(x, f"{where}[{k!r}]", out, depth + 1)


def all_patterns() -> dict[tuple, str]:
    """(pattern, flags) -> where it lives, for every table rule and module-level compiled regex."""
    out: dict[tuple, str] = {}
    for table in ("LIBRARY_RULES", "CLASS_RULES", "OP_CLASS_RULES"):
        for i, rule in enumerate(getattr(kp, table)):
            out.setdefault((rule.name, 0), f"kernel_patterns.{table}[{i}].name")
            if rule.op:
                out.setdefault((rule.op, 0), f"kernel_patterns.{table}[{i}].op")
    out.setdefault((kp.DRIVER_LAUNCH_RE, 0), "kernel_patterns.DRIVER_LAUNCH_RE")
    for info in pkgutil.walk_packages(tracekit.__path__, "tracekit."):
        if info.name.startswith(SKIP_MODULES):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            _collect(value, f"{info.name}.{name}", out)
    return out


def adversarial(pattern: str, n: int) -> Iterator[str]:
    """Names of about `n` characters that make a backtracking pattern work hard, then fail."""
    frags = sorted(set(re.findall(r"[A-Za-z_:<#>\- ]{2,}", pattern)), key=len, reverse=True)[:12] or ["a"]
    yield "_" * n + "!"
    yield "0" * n + "!"
    yield " " * n + "!"
    for f in frags:
        yield (f * (n // len(f) + 1))[:n] + "!"
        yield ((f + "_") * (n // (len(f) + 1) + 1))[:n] + "!"
        yield f + "_" * n + "!"
        yield f + "0" * n + "!"


def worst_time(rx: re.Pattern, n: int) -> tuple[float, str]:
    worst, which = 0.0, ""
    for name in adversarial(rx.pattern if isinstance(rx.pattern, str) else rx.pattern.decode("latin-1"), n):
        text: str | bytes = name if isinstance(rx.pattern, str) else name.encode("latin-1", "replace")
        start = time.process_time()  # CPU time: the search's own cost, not time waiting for a core
        rx.search(text)
        took = time.process_time() - start
        if took > worst:
            worst, which = took, name[:30]
    return worst, which


def test_patterns_were_found() -> None:
    patterns = all_patterns()
    assert len(patterns) > 60, len(patterns)
    assert any("kernel_patterns.CLASS_RULES" in w for w in patterns.values())
    assert any(w.startswith("tracekit.analyzers.roofline") for w in patterns.values())


def test_every_pattern_is_linear_on_adversarial_names() -> None:
    slow = []
    for (pattern, flags), where in all_patterns().items():
        rx = re.compile(pattern, flags)
        took, name = worst_time(rx, N)
        if took <= SECONDS_PER_CHAR * N:
            continue
        # over the bound (a busy machine?): linear time grows 4x on a 4x longer name, backtracking 16x+
        took4, _ = worst_time(rx, 4 * N)
        if took4 > SECONDS_PER_CHAR * 4 * N and took4 > 8 * took:
            slow.append(f"{where}: {took:.2f} s at {N} chars, {took4:.2f} s at {4 * N} ({name!r}...)")
    assert not slow, "\n".join(slow)


@pytest.mark.parametrize("name", [
    "triton_poi_fused_" + "_" * 30 + "!",  # the nested (...|_?)_?)+ group: 12 s at 20 underscores
    "xmma_" * 80_000,  # unanchored xmma_.*_cudnn: 46 s at 400 KB
    "triton_red_" + "mean" * 50_000,
    "cutlass" * 50_000,
])
def test_classifying_adversarial_kernel_names_is_fast(name: str) -> None:
    start = time.process_time()  # CPU time: unchanged by the other test workers sharing the cores
    classify_name(name, op="aten::" + "index" * 10_000 + "!")
    assert time.process_time() - start < 0.5


@pytest.mark.parametrize(("name", "klass"), [
    ("triton_poi_fused__to_copy_0", "copy"),
    ("triton_poi_fused__unsafe_view_clone_3", "copy"),
    ("triton_poi_fused_0", "copy"),
    ("triton_poi_fused_add_0", "elementwise"),
    ("triton_poi_fused_clone_t_12", "copy"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_cudnn", "conv"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "normalization"),
])
def test_rewritten_rules_still_classify_real_names(name: str, klass: str) -> None:
    """Names from the rules' `source` notes (Inductor, cuDNN on A100/H100) keep their class."""
    assert classify_name(name)[0] == klass
