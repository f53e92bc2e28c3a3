"""FLOPs/bytes estimated where an op call's recorded arguments lack a count, from its kernels (names, grids) and vLLM's step annotation: marked `estimate`.

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
    hidden's dtype; 2 FLOPs per routed element (scale and add).

vLLM paged attention (`vllm::unified_attention[_with_output](query[T, Hq, D], key[T, Hk, D],
value[T, Hk, Dv], output, layer_name)`) records no sequence lengths. vLLM's step annotation
(`vllm/v1/worker/gpu_worker.py` annotate_profile) says how the step's T tokens split:
`execute_context_<n>(<tokens>)_generation_<m>(<tokens>)`. A step of context requests only (m = 0)
whose context tokens equal the call's T is costed as n causal prefills of T/n tokens each over
their own keys (a fresh prompt: exact for one request or equal lengths; prefix-cached or chunked
prompts attend more keys, so it is then a lower bound): 2*Hq*(D + Dv) FLOPs per attended pair;
bytes: q, the output and each key and value once (the KV type from the kernel name's
`Qkv<type>`/`Kv<type>`, else the key's). Decode tokens (their context lengths are not recorded)
and sliding-window or chunked masks (the window is not recorded) leave the call unknown.

vLLM's older paged decode attention (`_C::paged_attention_v1(out, query[S, H, D], key_cache[B, Hk,
D/x, block, x], value_cache[B, Hk, Dv, block], num_kv_heads, scale, block_tables, seq_lens,
block_size, max_seq_len, ...)`, v2 with exp_sums, max_logits and tmp_out before the query; vLLM
csrc/torch_bindings.cpp) records the sequence lengths only as a tensor, but `max_seq_len` as a
value: S decode queries each over max_seq_len keys, an upper bound (exact when the batch's
sequences are equally long): FLOPs 2*H*(D + Dv) per pair; bytes: q, the output, the K/V of S *
max_seq_len tokens and the block table."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from tracekit.analyzers.costs.models_serving import QUANT_FLOPS, causal_pairs
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


UNIFIED_ATTENTION = "vllm::unified_attention"  # and vllm::unified_attention_with_output
# vllm/v1/worker/gpu_worker.py annotate_profile; a fork appends `_<count>` to the context tokens
VLLM_STEP = re.compile(r"^execute_context_(\d+)\((\d+)(?:_\d+)?\)_generation_(\d+)\((\d+)\)")
ATTENTION_KERNEL = re.compile(r"fmha|attn|attention|flash", re.IGNORECASE)
WINDOWED = re.compile(r"sliding|chunked|window", re.IGNORECASE)
KV_TYPE = re.compile(r"(?:Qkv|Kv)(E4m3|E5m2|E2m1|Bfloat16|Fp16|Fp32)")
NO_MASK = re.compile(r"Dense|NonCausal", re.IGNORECASE)


@dataclass(frozen=True)
class ServingStep:
    """One vLLM engine step as its annotation tells it: context (prefill) and generation requests and tokens."""

    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int


def serving_step(name: str) -> ServingStep | None:
    """The counts of a vLLM step annotation (`execute_context_1(888)_generation_0(0)`), None for any other name."""
    m = VLLM_STEP.match(name)
    return None if m is None else ServingStep(*(int(g) for g in m.groups()))


def unified_attention(args: OpArgs, names: Sequence[str], step: ServingStep | None) -> list[KernelCost | None] | None:
    """Per kernel of one `vllm::unified_attention*` call: the attention kernel's (FLOPs, bytes, dtype),
    None for the others; None for the call when the step's split or the mask is not known."""
    q, k, v, o = (args.tensor(i) for i in range(4))
    if step is None or q is None or k is None or v is None or len(q.dims) != 3 or len(k.dims) != 3:
        return None
    tokens, hq, d = q.dims
    hk, dv = k.dims[1], v.dims[-1]
    found = [i for i, n in enumerate(names) if ATTENTION_KERNEL.search(n)]
    if (step.generation_requests or step.context_requests <= 0 or step.context_tokens != tokens
            or len(found) != 1 or WINDOWED.search(names[found[0]])):
        return None
    name = names[found[0]]
    seqs, lq = step.context_requests, tokens / step.context_requests
    pairs = seqs * (lq * lq if NO_MASK.search(name) else causal_pairs(lq, lq))
    kv = KV_TYPE.search(name)
    kv_size = element_bytes(kv.group(1)) if kv else k.itemsize
    out_bytes = o.nbytes if o is not None else tokens * hq * dv * q.itemsize
    total = q.nbytes + out_bytes + tokens * hk * (d + dv) * kv_size
    dtype = compute_dtype(kv.group(1), kv.group(1)) if kv else q.dtype
    costs: list[KernelCost | None] = [None] * len(names)
    costs[found[0]] = (2.0 * hq * pairs * (d + dv), total, dtype)
    return costs


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


def _steps(annotations: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, list[ServingStep]]:
    """(starts, ends, counts) of the CPU-side vLLM step annotations, in time order."""
    found: list[tuple[float, float, ServingStep]] = []
    if annotations is not None and len(annotations):
        cpu = ~annotations[tables.AN_GPU].to_numpy(dtype=bool)
        for name, ts, end in zip(annotations[tables.AN_NAME].to_numpy()[cpu], annotations[tables.AN_TS].to_numpy()[cpu],
                                 annotations[tables.AN_END].to_numpy()[cpu], strict=True):
            if isinstance(name, str) and name.startswith("execute_context_") and (step := serving_step(name)):
                found.append((float(ts), float(end), step))
    found.sort(key=lambda x: x[0])
    return np.array([f[0] for f in found]), np.array([f[1] for f in found]), [f[2] for f in found]


def _step_at(steps: tuple[np.ndarray, np.ndarray, list[ServingStep]], ts: float) -> ServingStep | None:
    starts, ends, counts = steps
    i = int(np.searchsorted(starts, ts, side="right")) - 1
    return counts[i] if i >= 0 and ts < ends[i] else None


PAGED_ATTENTION = {"_C::paged_attention_v1": 1, "_C::paged_attention_v2": 4}  # op -> position of query
PAGED_KERNEL = re.compile(r"paged_attention_v[12]_kernel")


def paged_attention(args: OpArgs, names: Sequence[str], first: int) -> list[KernelCost | None] | None:
    """Per kernel of one `_C::paged_attention_v1/v2` call (query at argument `first`): the attention
    kernel's (FLOPs, bytes, dtype) with every sequence at max_seq_len, None for the others (v2's reduce)."""
    q, kc, vc, table = args.tensor(first), args.tensor(first + 1), args.tensor(first + 2), args.tensor(first + 5)
    longest = args.value(first + 8)
    found = [i for i, n in enumerate(names) if PAGED_KERNEL.search(n)]
    if (q is None or kc is None or vc is None or len(q.dims) != 3 or len(kc.dims) != 5 or len(vc.dims) != 4
            or isinstance(longest, bool) or not isinstance(longest, int) or longest <= 0 or len(found) != 1):
        return None
    seqs, hq, d = q.dims
    hk, dv = kc.dims[1], vc.dims[2]
    keys = seqs * longest
    total = q.nbytes + seqs * hq * dv * q.itemsize + keys * hk * (d * kc.itemsize + dv * vc.itemsize)
    costs: list[KernelCost | None] = [None] * len(names)
    costs[found[0]] = (2.0 * hq * keys * (d + dv), total + (table.nbytes if table is not None else 0.0), q.dtype)
    return costs


def _by_op(name: str) -> bool:
    return name.startswith(UNIFIED_ATTENTION) or name in PAGED_ATTENTION


def estimate_calls(gpu: pd.DataFrame, ops: pd.DataFrame, op: np.ndarray, calls: np.ndarray,
                   rows: np.ndarray, annotations: pd.DataFrame | None = None) -> dict[int, KernelCost]:
    """GPU row -> (FLOPs, bytes, dtype) for the kernel rows `rows` (a mask: kernels of op calls
    no model costed) whose call an estimator here can read; {} when none can. `annotations` (the
    rank's table) gives vLLM's step counts to the attention estimate."""
    names = gpu[tables.GPU_NAME].to_numpy(dtype=object)
    if not rows.any():
        return {}
    op_names = ops[tables.OP_NAME].to_numpy(dtype=object)
    idx = np.flatnonzero(rows)
    attention = np.fromiter((isinstance(n, str) and _by_op(n) for n in op_names[op[idx]]), dtype=bool, count=len(idx))
    if not attention.any() and not any(has_estimator(n) for n in pd.unique(names[rows])):
        return {}
    family = attention | np.fromiter((has_estimator(n) for n in names[idx]), dtype=bool, count=len(idx))
    wanted = np.isin(calls[idx], np.unique(calls[idx][family]))
    idx = idx[wanted]
    gx = gpu[tables.GPU_GRID[0]].to_numpy()
    gy = gpu[tables.GPU_GRID[1]].to_numpy()
    dur = gpu[tables.GPU_DUR].to_numpy(dtype=float)
    order = np.argsort(gpu[tables.GPU_TS].to_numpy()[idx], kind="stable")
    idx = idx[order]
    dims, types = ops[tables.OP_INPUT_DIMS].to_numpy(), ops[tables.OP_INPUT_TYPES].to_numpy()
    concrete = ops[tables.OP_CONCRETE_INPUTS].to_numpy()
    groups: dict[int, list[int]] = {}
    for i, c in zip(idx.tolist(), calls[idx].tolist(), strict=True):
        groups.setdefault(c, []).append(i)
    steps = _steps(annotations) if attention.any() else None
    op_ts = ops[tables.OP_TS].to_numpy()
    found: dict[int, KernelCost] = {}
    for group in groups.values():
        members = np.array(group)
        r = int(op[members[0]])
        kernel_names = [str(n) for n in names[members]]
        args = OpArgs.of(dims[r], types[r], concrete=concrete[r])
        op_name = str(op_names[r])
        if steps is not None and op_name.startswith(UNIFIED_ATTENTION):
            costs = unified_attention(args, kernel_names, _step_at(steps, float(op_ts[r])))
        elif op_name in PAGED_ATTENTION:
            costs = paged_attention(args, kernel_names, PAGED_ATTENTION[op_name])
        else:
            grids = [(int(x), int(y)) if x == x and y == y else (0, 0)
                     for x, y in zip(gx[members], gy[members], strict=True)]
            costs = trtllm_moe(args, kernel_names, grids, dur[members].tolist())
        if costs is not None:
            found.update((int(i), c) for i, c in zip(members, costs, strict=True) if c is not None)
    return found
