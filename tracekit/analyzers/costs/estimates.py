"""FLOPs/bytes estimated from the kernels an op call launched (names, grids) where its recorded arguments lack a count: marked `estimate`.

The op models (costs.models) read only an op's recorded arguments and return None where a count
is not recorded. Some serving ops record too little: `vllm::moe_forward(hidden[T, H],
router_logits[T, E], layer_name)` records no expert weights, so neither the intermediate size nor
top-k. Its kernels say the rest, by name and launch grid. The estimators here rebuild the counts
from the recorded tensors plus what the kernels name, cross-check them against each other, and
return one (FLOPs, bytes) per kernel of the call (None: that kernel cannot be estimated; the
whole call is left unknown when its GEMMs cannot). Every value here is marked `estimate`.

trtllm-gen fused MoE (flashinfer `trtllm_*_block_scale_moe`, vLLM's MX-FP4 MoE on Blackwell):
  - GEMM kernels `bmm_<C>_<A><B>_Fp32_t<M>x<N>x<K>_..._transOut_...`: A is the expert weights
    (tile M over the output features), B the routed token rows (tile N), C the output; grid.x * M
    = the GEMM's output features. The first GEMM of the call (gate+up, `swiGlu` fused: its output
    is half its features) maps H -> N1; the second maps N1/2 (or N1) -> H, which must equal the
    recorded hidden size, else no estimate. FLOPs: 2 * T*k rows * in * out per GEMM, the rows the
    op routes (padding to the tile is not counted; grid.y * N rows bound it and must not be
    fewer). Bytes: the weights of the experts that can be active, min(E, T*k), once; the input
    rows once (the T tokens for the first GEMM, which gathers each k times; the T*k routed rows
    for the second); the output rows once; MX types add one scale byte per 32 elements.
  - top-k: the finalize kernel's KernelParams<Type, TypeExpW, TopK, UsePdl> template argument.
  - routing kernels (`moe::dev::routing::*`): read the T*E router logits, write T*k ids and
    weights; one FLOP per logit (the top-k scan); split over the routing kernels by duration.
  - activation quantization (`quantize_with_block_size`): read T*H, write T*H of the first GEMM's
    B type; 2 FLOPs per element (as costs.models_serving.QUANT_FLOPS).
  - finalize: read T*k rows of H (the second GEMM's output), the T*k ids and weights, write T*H in the
    hidden's dtype; 2 FLOPs per routed element (scale and add)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.models_serving import QUANT_FLOPS
from tracekit.analyzers.costs.op_args import DTYPE_SIZE, OpArgs
from tracekit.trace import tables

MX_BLOCK = 32  # elements per E8M0 scale byte of the OCP MX formats
# trtllm-gen GEMM kernel names: bmm_<C>_<A><B>_<accumulator>_t<tileM>x<tileN>x<tileK>...
_TYPE = r"(?:Mx)?E[245]m[123]|Bfloat16|Fp16|Fp32"
TRTLLM_BMM = re.compile(rf"^bmm_(?P<c>{_TYPE})_(?P<a>{_TYPE})(?P<b>{_TYPE})_Fp32_t(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)")
TRTLLM_ELEMENT = {"E2m1": 0.5, "E4m3": 1.0, "E5m2": 1.0, "Bfloat16": 2.0, "Fp16": 2.0, "Fp32": 4.0}
FINALIZE = re.compile(r"moe::dev::finalize::\w+<moe::dev::finalize::KernelParams<[^,<>]+,\s*[^,<>]+,\s*(\d+)\s*,")
ROUTING = "moe::dev::routing::"
QUANTIZE = "quantize_with_block_size"
ROUTING_FLOPS = 1.0  # per router logit: the top-k scan
FINALIZE_FLOPS = 2.0  # per routed element: scale by the routing weight and add

KernelCost = tuple[float, float, str]  # (FLOPs, bytes, dtype) of one kernel


@lru_cache(maxsize=1024)
def _bmm(name: str) -> tuple[str, str, str, int, int, int, bool] | None:
    """(C, A, B, tile M, tile N, tile K, swiGlu fused) of a trtllm-gen GEMM kernel name."""
    m = TRTLLM_BMM.match(name)
    if m is None or "transOut" not in name:
        return None
    return m["c"], m["a"], m["b"], int(m["m"]), int(m["n"]), int(m["k"]), "_swiGlu" in name


def compute_dtype(a: str, b: str) -> str:
    """The precision a trtllm-gen GEMM multiplies in, from its two input types: fp4 x fp4 at the
    fp4 rate, any other 8-bit-or-narrower pair at the fp8 rate, else bf16/fp16/fp32."""
    a, b = a.removeprefix("Mx"), b.removeprefix("Mx")
    if a == b == "E2m1":
        return "fp4"
    if a[0] == "E" and b[0] == "E":
        return "fp8"
    return {"Bfloat16": "bf16", "Fp16": "fp16"}.get(a, "fp32")


def element_bytes(kind: str) -> float:
    """Bytes per element of a trtllm-gen type name, its MX scale included (MxE2m1: 0.5 + 1/32)."""
    base = TRTLLM_ELEMENT[kind.removeprefix("Mx")]
    return base + (1.0 / MX_BLOCK if kind.startswith("Mx") else 0.0)


def has_estimator(name: str) -> bool:
    """Whether a kernel name belongs to a family an estimator here reads (a cheap first filter)."""
    return name.startswith("bmm_") or "moe::dev::" in name


def trtllm_moe(args: OpArgs, names: Sequence[str], grids: Sequence[tuple[int, int]],
               durs: Sequence[float]) -> list[KernelCost | None] | None:
    """Per kernel (in launch order) of one fused-MoE op call whose first two arguments are
    hidden[T, H] and router_logits[T, E]: (FLOPs, bytes, dtype), None for a kernel it does not know;
    None for the call when its two GEMMs, top-k or the hidden size do not agree."""
    x, logits = args.tensor(0), args.tensor(1)
    if x is None or logits is None or len(x.dims) != 2 or len(logits.dims) != 2 or x.dims[0] != logits.dims[0]:
        return None
    tokens, hidden = x.dims
    experts = logits.dims[1]
    gemms = [(i, p) for i, p in enumerate(_bmm(n) for n in names) if p is not None]
    tops = {int(m.group(1)) for m in (FINALIZE.search(n) for n in names) if m}
    if len(gemms) != 2 or len(tops) != 1:
        return None
    top_k = tops.pop()
    rows = tokens * top_k
    active = min(experts, rows)
    (i1, g1), (i2, g2) = gemms
    n1 = grids[i1][0] * g1[3]  # output features of the first GEMM (gate and up)
    inter = n1 // 2 if g1[6] else n1
    if grids[i2][0] * g2[3] != hidden or grids[i1][1] * g1[4] < rows or grids[i2][1] * g2[4] < rows:
        return None
    out: list[KernelCost | None] = [None] * len(names)
    # (kernel, its parse, K, output features, distinct input rows, output width)
    for i, g, k_in, n_out, rows_in, width in ((i1, g1, hidden, n1, tokens, inter), (i2, g2, inter, hidden, rows, hidden)):
        c, a, b = (element_bytes(t) for t in g[:3])
        weights = active * n_out * k_in * a
        out[i] = (2.0 * rows * k_in * n_out, weights + rows_in * k_in * b + rows * width * c, compute_dtype(g[1], g[2]))
    act = element_bytes(g1[2])
    routed = rows * (DTYPE_SIZE["int32"] + logits.itemsize)  # ids and weights
    routing = [i for i, n in enumerate(names) if ROUTING in n]
    total = sum(durs[i] for i in routing)
    for i in routing:
        share = durs[i] / total if total > 0 else 1.0 / len(routing)
        out[i] = (share * ROUTING_FLOPS * logits.numel, share * (logits.nbytes + routed), logits.dtype)
    for i, n in enumerate(names):
        if QUANTIZE in n:
            out[i] = (QUANT_FLOPS * x.numel, x.nbytes + x.numel * act, x.dtype)
        elif FINALIZE.search(n):
            second = element_bytes(g2[0])
            out[i] = (FINALIZE_FLOPS * rows * hidden, rows * hidden * second + routed + x.nbytes, x.dtype)
    return out


def estimate_calls(gpu: pd.DataFrame, ops: pd.DataFrame, op: np.ndarray, calls: np.ndarray,
                   rows: np.ndarray) -> dict[int, KernelCost]:
    """GPU row -> (FLOPs, bytes, dtype) for the kernel rows `rows` (a mask: kernels of op calls
    no model costed) whose call an estimator here can read; {} when none can."""
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    if not rows.any() or not any(has_estimator(n) for n in pd.unique(names[rows])):
        return {}
    idx = np.flatnonzero(rows)
    family = np.fromiter((has_estimator(n) for n in names[idx]), dtype=bool, count=len(idx))
    wanted = np.isin(calls[idx], np.unique(calls[idx][family]))
    idx = idx[wanted]
    gx = gpu[tables.GPU_GRID[0]].to_numpy()
    gy = gpu[tables.GPU_GRID[1]].to_numpy()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    order = np.argsort(gpu[tables.GPU_TS].to_numpy()[idx], kind="stable")
    idx = idx[order]
    dims, types = ops[tables.OP_INPUT_DIMS].to_numpy(), ops[tables.OP_INPUT_TYPES].to_numpy()
    groups: dict[int, list[int]] = {}
    for i, c in zip(idx.tolist(), calls[idx].tolist(), strict=True):
        groups.setdefault(c, []).append(i)
    found: dict[int, KernelCost] = {}
    for group in groups.values():
        members = np.array(group)
        r = int(op[members[0]])
        grids = [(int(x), int(y)) if x == x and y == y else (0, 0) for x, y in zip(gx[members], gy[members], strict=True)]
        costs = trtllm_moe(OpArgs.of(dims[r], types[r]), [str(n) for n in names[members]], grids,
                           dur[members].tolist())
        if costs is not None:
            found.update((int(i), c) for i, c in zip(members, costs, strict=True) if c is not None)
    return found
