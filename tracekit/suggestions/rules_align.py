"""Rule about GEMM shapes off alignment: leading dimensions (strides) and kernel names (alignN, fallback architectures) that keep cuBLAS off its aligned kernels."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tracekit.analyzers.analysis import Analysis
from tracekit.analyzers.costs.op_args import DTYPE_SIZE, format_shapes
from tracekit.analyzers.detectors import gemm_layout as gl
from tracekit.suggestions.common import Scope, fmt_us, gemm_dims, suggestion
from tracekit.suggestions.model import Suggestion
from tracekit.suggestions.rules_kernels import MATMUL_DTYPES
from tracekit.units import plural

ALIGN_BYTES = gl.ALIGN_BYTES
VOCAB_DIM_MIN = 16384  # dims at least this large are vocabulary-like: pad them to VOCAB_ALIGN
VOCAB_ALIGN = 64
# cuBLAS/CUTLASS kernel names carry the operands' alignment in elements (`_align1`, `_align2`, ...)
# and the architecture they were built for (`sm75_`, `cutlass_75_`, `sm80_`): a 16-bit GEMM with
# align < 8, or a kernel for an older architecture than the device's, is a fallback kernel.
ALIGN_NAME = re.compile(r"align(\d{1,2})(?!\d)")
ARCH_NAME = re.compile(r"(?<![A-Za-z0-9])(?:sm|cutlass_)(\d{2,3})(?=_)")
FALLBACK_GENERATIONS = 15  # sm75 on sm_90, sm80 on sm_100: not sm80 kernels on sm_90 (cuBLAS picks them)
# The reference when no aligned GEMM of the same dtype and similar size ran in the trace: an
# aligned GEMM of this size at 70 % of the dense roof (the padded LM-head GEMMs ran at 73–82 % on
# the H200 in the real-run measurements; rounded down).
DEVICE_ROOF_PCT = 70.0
SIMILAR_FLOPS = 8.0  # a reference GEMM's FLOPs per call within this factor of the candidate's


def _multiple(d: int, dtype: str) -> int:
    return VOCAB_ALIGN if d >= VOCAB_DIM_MIN else max(int(ALIGN_BYTES / DTYPE_SIZE.get(dtype, 4.0)), 1)


def _pad(d: int, multiple: int) -> int:
    return -(-d // multiple) * multiple


def _device_sm(analysis: Analysis) -> int | None:
    for r in analysis.ranks:
        for gpu in r.facts.gpus if r.facts is not None else ():
            m = re.fullmatch(r"sm_(\d{2,3})", gpu.compute or "")
            if m:
                return int(m.group(1))
    return None


def _layouts(analysis: Analysis) -> dict[tuple[str, str, str], tuple[str, str]]:
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    for r in analysis.ranks:
        t = r.patterns.gemm_layouts if r.patterns is not None else None
        if t is None or not len(t):
            continue
        for rec in t.to_dict("records"):
            out.setdefault((rec[gl.GL_KERNEL], rec[gl.GL_OP], rec[gl.GL_SHAPES]), (rec[gl.GL_LDS], rec[gl.GL_MISALIGNED]))
    return out


def _evidence(row: dict[str, Any], dims: tuple[int, int, int], layouts: dict[tuple[str, str, str], tuple[str, str]],
              sm: int | None) -> tuple[list[str], list[tuple[str, int, int]]]:
    """(why this GEMM is off alignment, in words; the dims to pad: (name, value, padded))."""
    dtype, name = row["dtype"], str(row["name"])
    why: list[str] = []
    m = ALIGN_NAME.search(name)
    if m and int(m.group(1)) < _multiple(1, dtype):
        why.append(f"kernel align{m.group(1)}")
    a = ARCH_NAME.search(name)
    if a and sm is not None and int(a.group(1)) <= sm - FALLBACK_GENERATIONS:
        why.append(f"sm{a.group(1)} kernel on sm_{sm}")
    found = layouts.get((name, str(row["op"]), format_shapes(row["shapes"]) or ""))
    leading: set[int] | None = None
    if found is not None:
        lds, bad = found
        leading = {int(x.split()[-1]) for x in lds.split(", ") if x.split()[-1].isdigit()}
        if bad:
            why.append(f"leading dim {bad}")
    pad = []
    for label, d in zip(("M", "N", "K"), dims, strict=True):
        mult = _multiple(d, dtype)
        if d > 1 and d % mult:
            pad.append((label, d, _pad(d, mult)))
    if not why:  # no stride or name evidence: N and K are the leading dims of row-major operands
        off = [p for p in pad if (p[1] in leading if leading is not None else p[0] != "M")]
        if off:
            why.append("dims " + ", ".join(f"{n}={d}" for n, d, _ in off))
    return why, pad


def misaligned_calls(analysis: Analysis) -> float:
    """GEMM calls off alignment (the evidence align_dims reads: strides, kernel names, N/K), per step."""
    k = analysis.kernels
    if k is None or not len(k):
        return 0.0
    sm, layouts = _device_sm(analysis), _layouts(analysis)
    n = 0
    for row in k[k["class"] == "gemm"].to_dict("records"):
        dims = gemm_dims(row["op"], row["shapes"])
        if dims is not None and row["dtype"] in MATMUL_DTYPES and _evidence(row, dims, layouts, sm)[0]:
            n += int(row["count"])
    return n / max(analysis.totals.steps, 1)


def align_dims(analysis: Analysis) -> Suggestion | None:
    """GEMMs off alignment (a misaligned leading dimension from the strides, an alignN / older-arch
    kernel name, else N or K off a 16-byte multiple): padded FLOPs at the roofline % of aligned GEMMs
    of the same dtype and similar size in this trace, else DEVICE_ROOF_PCT of the roof."""
    scope = Scope.of(analysis)
    k = analysis.kernels
    if analysis.device is None or k is None or not len(k):
        return None
    sel = k[(k["class"] == "gemm") & k["flops"].notna() & (k["time_us"] > 0)]
    sm, layouts = _device_sm(analysis), _layouts(analysis)
    cands: list[tuple[dict[str, Any], tuple[int, int, int], list[str], list[tuple[str, int, int]]]] = []
    refs: list[tuple[str, float, float, float]] = []  # (dtype, FLOPs per call, roofline %, time)
    for row in sel.to_dict("records"):
        dims = gemm_dims(row["op"], row["shapes"])
        if dims is None or row["dtype"] not in MATMUL_DTYPES or not row["roofline_pct"] > 0:
            continue
        why, pad = _evidence(row, dims, layouts, sm)
        if why:
            cands.append((row, dims, why, pad))
        elif not pad:
            refs.append((row["dtype"], row["flops"] / max(row["count"], 1), row["roofline_pct"], row["time_us"]))
    rows, total, sources = [], 0.0, set()
    for row, dims, why, pad in cands:
        per_call = row["flops"] / max(row["count"], 1)
        near = [(p, t) for d, f, p, t in refs if d == row["dtype"] and 1 / SIMILAR_FLOPS <= f / per_call <= SIMILAR_FLOPS]
        if near:
            ref_pct = float(np.average([p for p, _ in near], weights=[t for _, t in near]))
            source = "aligned GEMMs of similar size in this trace"
        else:
            ref_pct, source = DEVICE_ROOF_PCT, f"{DEVICE_ROOF_PCT:.0f} % of the roof (no aligned GEMM of similar size ran)"
        if not ref_pct > row["roofline_pct"]:
            continue
        padded = dict(zip(("M", "N", "K"), dims, strict=True))
        padded.update({name: p for name, _, p in pad})
        grow = padded["M"] * padded["N"] * padded["K"] / (dims[0] * dims[1] * dims[2])
        new = row["time_us"] * grow * row["roofline_pct"] / ref_pct
        if new >= row["time_us"]:
            continue
        sources.add(source)
        total += row["time_us"] - new
        rows.append({"kernel": row["name"], "op": row["op"], "shapes": row["shapes"], "mnk": "×".join(map(str, dims)),
                     "why": "; ".join(why), "pad": ", ".join(f"{n}={d} → {p}" for n, d, p in pad) or "(strides)",
                     "count": int(row["count"]), "time_us": row["time_us"], "roofline_pct": row["roofline_pct"],
                     "reference_pct": ref_pct, "padded_time_us": new, "saving_us": row["time_us"] - new})
    if not rows:
        return None
    rows.sort(key=lambda x: -x["saving_us"])
    saving = total / scope.ranks
    formula = ("Σ t − t × padded FLOPs / FLOPs × (this GEMM's roofline % / the reference: "
               + "; ".join(sorted(sources)) + f") = {fmt_us(saving)} ({fmt_us(saving / scope.steps)} per step)")
    named = {p.split("=")[0] for x in rows for p in x["pad"].split(", ") if "=" in p}
    dims_named = [d for d in ("M", "N", "K") if d in named]
    title = (f"Pad {plural(len(rows), 'GEMM shape')} off alignment ({', '.join(dims_named) or 'leading dims'}; "
             f"{rows[0]['why']}): cuBLAS falls back to slower kernels")
    return suggestion("align_dims", title, saving, scope, formula, rows)
