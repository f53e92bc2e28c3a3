"""FLOPs/bytes models of the custom ops serving stacks run (vLLM `_C`, SGLang `sgl_kernel`, aiter): norms, RoPE, KV-cache writes, activations, fp8 quant, fused MoE, varlen attention.

Each row of SERVING_ROWS is (op names, model, source); the arguments are read by position as the
op's schema (the source) declares them. Bytes are compulsory traffic (inputs once, outputs once;
in-place tensors read and written); FLOPs are per-element counts for the memory-bound ops and the
GEMM/attention products for MoE and attention. Where a count the cost needs is not recorded (the
expert weights of `vllm::moe_forward`, the sequence lengths of `vllm::unified_attention*`), the model
returns None: unknown, not a guess (costs.estimates may then estimate the call from its kernels and
vLLM's step annotation, marked as an estimate)."""

from __future__ import annotations

from tracekit.analyzers.costs.op_args import Model, OpArgs, OpCost, Tensor

NORM_FLOPS = 5.0  # per element: square, sum, rsqrt share, scale, weight (models_nn.NORM_FLOPS)
ROPE_FLOPS = 3.0  # per rotated element: x*cos - y*sin (a pair is 6 FLOPs)
ACT_FLOPS = {"silu": 5.0, "swiglu": 5.0, "gelu": 9.0}  # activation + the gating multiply, per output element
QUANT_FLOPS = 2.0  # scale and convert, per element


def _t(a: OpArgs, i: int) -> Tensor | None:
    return a.tensor(i)


def rms_norm(name: str, a: OpArgs) -> OpCost | None:
    """RMSNorm, with or without the fused residual add, out-of-place or in place: every tensor of
    the activation's shape counts once, twice for the in-place fused-add ops (vLLM/sgl_kernel
    `fused_add_rms_norm(input, residual, weight, eps)` read and overwrite input and residual);
    the 1-D weight once."""
    ts = a.tensors()
    if not ts:
        return None
    x = max(ts, key=lambda t: t.numel)
    acts = [t for t in ts if t.dims == x.dims]
    weights = [t for t in ts if len(t.dims) == 1 and x.dims and t.dims[0] == x.dims[-1]]
    if not weights or len(x.dims) < 2:
        return None
    in_place = "fused_add" in name
    total = sum(t.nbytes for t in acts) * (2 if in_place else 1) + weights[0].nbytes
    adds = 1.0 if "add" in name else 0.0
    return OpCost((NORM_FLOPS + adds) * x.numel, total, x.dtype)


def rotary_embedding(name: str, a: OpArgs) -> OpCost | None:
    """rotary_embedding(positions[T], query[T, Hq*D], key[T, Hk*D], head_size, cos_sin_cache[P, R],
    is_neox): query and key rotated in place over R of each head's D elements (read and written),
    one cache row of R per token read, positions read."""
    pos, q, k, cache = _t(a, 0), _t(a, 1), _t(a, 2), _t(a, 4)
    head = a.value(3)
    if pos is None or q is None or cache is None or not isinstance(head, int) or head <= 0 or len(cache.dims) != 2:
        return None
    rot = cache.dims[1]
    tokens = pos.numel
    rotated = sum(t.numel // head * rot for t in (q, k) if t is not None)
    total = pos.nbytes + 2.0 * rotated * q.itemsize + tokens * rot * cache.itemsize
    return OpCost(ROPE_FLOPS * rotated, total, q.dtype)


def kv_cache_write(name: str, a: OpArgs) -> OpCost | None:
    """reshape_and_cache[_flash](key, value, key_cache, value_cache, slot_mapping, ...) and
    SGLang store_cache/store_kvcache(k, v, k_cache, v_cache, loc, ...): read key and value, write
    as many elements into the caches in the cache's element size, read the slot indices. A cache
    of another dtype (an fp8 cache stored as uint8) costs one scaling FLOP per element."""
    k, v, kc, vc, slots = (_t(a, i) for i in range(5))
    if k is None or v is None or kc is None or vc is None:
        return None
    written = k.numel * kc.itemsize + v.numel * vc.itemsize
    total = k.nbytes + v.nbytes + written + (slots.nbytes if slots is not None else 0.0)
    flops = float(k.numel + v.numel) if kc.dtype != k.dtype else 0.0
    return OpCost(flops, total, k.dtype)


def act_and_mul(name: str, a: OpArgs) -> OpCost | None:
    """silu_and_mul / gelu_and_mul / gelu_tanh_and_mul(out[..., d], input[..., 2d]): read input,
    write out (its own dtype: the fused-quant variants write fp8)."""
    out, x = _t(a, 0), _t(a, 1)
    if out is None or x is None or x.numel != 2 * out.numel:
        return None
    per = ACT_FLOPS["gelu"] if "gelu" in name else ACT_FLOPS["silu"]
    return OpCost(per * out.numel, x.nbytes + out.nbytes, x.dtype)


def fp8_quant(name: str, a: OpArgs) -> OpCost | None:
    """static/dynamic[_per_token]_scaled_fp8_quant(out, input, scale, ...): read input (twice for
    the dynamic ones: the max, then the conversion), write out and the scales."""
    out, x = _t(a, 0), _t(a, 1)
    if out is None or x is None or out.numel != x.numel:
        return None
    scale = _t(a, 2)
    reads = 2 if name.split("::")[-1].startswith("dynamic") else 1
    total = reads * x.nbytes + out.nbytes + (scale.nbytes if scale is not None else 0.0)
    return OpCost(QUANT_FLOPS * x.numel, total, x.dtype)


def fused_experts(name: str, a: OpArgs) -> OpCost | None:
    """Fused MoE with its weights recorded: (inplace|outplace_)fused_experts(hidden[T, H],
    w1[E, N1, H], w2[E, H, I], topk_weights[T, k], topk_ids[T, k], ...). FLOPs: T*k tokens through
    both expert GEMMs, 2*T*k*H*(N1 + I); bytes: the hidden states in and out, the weights of the
    experts that can be active (min(E, T*k)) once each, the routing tensors."""
    x, w1, w2, tw, ti = (_t(a, i) for i in range(5))
    if x is None or w1 is None or w2 is None or tw is None or len(x.dims) != 2 or len(w1.dims) != 3 \
            or len(w2.dims) != 3 or w1.dims[-1] != x.dims[1] or w2.dims[1] != x.dims[1]:
        return None
    tokens, hidden = x.dims
    top_k = tw.dims[-1]
    n1, inter, experts = w1.dims[1], w2.dims[2], w1.dims[0]
    flops = 2.0 * tokens * top_k * hidden * (n1 + inter)
    active = min(experts, tokens * top_k)
    weights = active * (w1.nbytes + w2.nbytes) / experts
    routing = tw.nbytes + (ti.nbytes if ti is not None else 0.0)
    return OpCost(flops, 2.0 * x.nbytes + weights + routing, x.dtype)


def causal_pairs(lq: float, lk: float) -> float:
    """(query, key) pairs a causal (bottom-right aligned) sequence attends: lq*lk - lq*(lq-1)/2."""
    return lq * lk - lq * (lq - 1) / 2 if lq <= lk else lk * (lk + 1) / 2


def batch_prefill(name: str, a: OpArgs) -> OpCost | None:
    """aiter::mha_batch_prefill(q[Tq, Hq, D], k_cache[P, (page,) Hk, D], v_cache, cu_seqlens_q[B+1],
    kv_indptr[B+1], kv_page_indices[N], max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
    logits_soft_cap, zero_tensors, is_causal, ...): B sequences of Tq/B queries over N*page/B keys
    each (the averages: the per-sequence lengths are not recorded, so an estimate when they
    differ); 4*Hq*D FLOPs per attended pair; bytes: q and the output, the K/V of the N*page
    tokens read, the index tensors."""
    q, kc, vc, cuq, indptr, pages = (_t(a, i) for i in range(6))
    if q is None or kc is None or vc is None or cuq is None or pages is None or len(q.dims) != 3:
        return None
    seqs = cuq.numel - 1
    if seqs <= 0:
        return None
    page = kc.dims[1] if len(kc.dims) == 4 else 1
    tq, hq, d = q.dims
    tk = pages.numel * page
    causal = a.value(12) is True
    lq, lk = tq / seqs, tk / seqs
    pairs = seqs * (causal_pairs(lq, lk) if causal else lq * lk)
    hk, dv = kc.dims[-2], vc.dims[-1]
    kv = tk * hk * (d * kc.itemsize + dv * vc.itemsize)
    index = cuq.nbytes + (indptr.nbytes if indptr is not None else 0.0) + pages.nbytes
    return OpCost(2.0 * hq * pairs * (d + dv), q.nbytes + tq * hq * dv * q.itemsize + kv + index, q.dtype)


def flash_varlen(name: str, a: OpArgs) -> OpCost | None:
    """flash-attn _flash_attn_varlen_forward(q[Tq, Hq, D], k[Tk, Hk, D], v[Tk, Hk, Dv],
    cu_seqlens_q[B+1], cu_seqlens_k[B+1], max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
    causal, ...): B sequences of Tq/B queries over Tk/B keys (averages: the per-sequence lengths
    are not recorded); bytes: q, k, v, the output and the offsets."""
    q, k, v, cuq, cuk = (_t(a, i) for i in range(5))
    if q is None or k is None or v is None or cuq is None or len(q.dims) != 3 or len(k.dims) != 3:
        return None
    seqs = cuq.numel - 1
    if seqs <= 0:
        return None
    tq, hq, d = q.dims
    tk, dv = k.dims[0], v.dims[-1]
    lq, lk = tq / seqs, tk / seqs
    pairs = seqs * (causal_pairs(lq, lk) if a.value(9) is True else lq * lk)
    index = cuq.nbytes + (cuk.nbytes if cuk is not None else 0.0)
    total = q.nbytes + k.nbytes + v.nbytes + tq * hq * dv * q.itemsize + index
    return OpCost(2.0 * hq * pairs * (d + dv), total, q.dtype)


_NORMS = ("_C::rms_norm", "_C::fused_add_rms_norm", "_C::rms_norm_static_fp8_quant",
          "_C::fused_add_rms_norm_static_fp8_quant", "aiter::rmsnorm", "aiter::rms_norm", "aiter::add_rmsnorm",
          "aiter::rmsnorm2d_fwd", "aiter::rmsnorm2d_fwd_with_add", "sgl_kernel::rmsnorm",
          "sgl_kernel::fused_add_rmsnorm", "sgl_kernel::gemma_rmsnorm", "sgl_kernel::gemma_fused_add_rmsnorm")
_ACTS = ("_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "sgl_kernel::silu_and_mul",
         "sgl_kernel::gelu_and_mul", "sgl_kernel::gelu_tanh_and_mul", "aiter::silu_and_mul", "aiter::gelu_and_mul",
         "aiter::gelu_tanh_and_mul")

# (op names, model, source): where the argument order was read.
SERVING_ROWS: tuple[tuple[tuple[str, ...], Model, str], ...] = (
    (_NORMS, rms_norm, "vLLM csrc/torch_bindings.cpp rms_norm(out, input, weight, eps) / fused_add_rms_norm(input, "
     "residual, weight, eps); aiter rmsnorm(out, input, weight, eps) / add_rmsnorm(out, input, residual_in, "
     "residual_out, weight, eps) and sgl_kernel as recorded in the TraceLens B200 vLLM and SGLang MI300X traces"),
    (("_C::rotary_embedding", "sgl_kernel::rotary_embedding", "_C::batched_rotary_embedding"), rotary_embedding,
     "vLLM csrc/pos_encoding_kernels.cu rotary_embedding(positions, query, key, head_size, cos_sin_cache, "
     "is_neox), copied by sgl_kernel (TraceLens B200 vLLM, SGLang MI300X)"),
    (("_C_cache_ops::reshape_and_cache", "_C_cache_ops::reshape_and_cache_flash", "sglang::store_cache",
      "sgl_kernel::store_kvcache", "sglang::store_kvcache"), kv_cache_write,
     "vLLM csrc/cache_kernels.cu reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "
     "kv_cache_dtype, k_scale, v_scale); SGLang store_cache(k, v, k_cache, v_cache, loc) (TraceLens traces)"),
    (_ACTS, act_and_mul, "vLLM csrc/activation_kernels.cu silu_and_mul(out, input) with input [..., 2d]; "
     "sgl_kernel and aiter keep the signature (TraceLens SGLang MI300X: sgl_kernel::silu_and_mul)"),
    (("_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant", "_C::dynamic_per_token_scaled_fp8_quant"),
     fp8_quant, "vLLM csrc/quantization/fp8/common.cu scaled_fp8_quant(out, input, scale[, scale_ub]) (B200 vLLM)"),
    (("vllm::inplace_fused_experts", "vllm::outplace_fused_experts", "vllm::fused_experts",
      "sglang::inplace_fused_experts", "sglang::outplace_fused_experts"), fused_experts,
     "vLLM model_executor/layers/fused_moe/fused_moe.py inplace/outplace_fused_experts(hidden_states, w1, w2, "
     "topk_weights, topk_ids, ...), also SGLang's fused_moe_triton"),
    (("flash_attn::_flash_attn_varlen_forward",), flash_varlen,
     "flash-attn flash_attn_interface.py _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, "
     "max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_size_left, window_size_right, ...)"),
    (("aiter::mha_batch_prefill",), batch_prefill,
     "aiter csrc mha_batch_prefill(q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q, max_seqlen_k, "
     "p_dropout, softmax_scale, logits_soft_cap, zero_tensors, is_causal, ...) (TraceLens SGLang MI300X prefill)"),
)

SERVING_MODELS: dict[str, Model] = {name: model for names, model, _ in SERVING_ROWS for name in names}
