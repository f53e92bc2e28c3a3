"""Code snippets of the rules about work the GPU need not do (one launch over all the pieces; grouped-query attention without expanded K/V; gradients of frozen parameters; an L2 penalty the optimizer applies; gradients freed, not zeroed; one backward over the summed losses; Triton passes fused), keyed by rule id."""

from __future__ import annotations

GRID_SNIPPETS: dict[str, str] = {
    "merge_launches": '''\
# One launch per piece (segment, head, sample) with a small grid leaves most SMs idle:
#   for s in range(n): kernel[(blocks,)](x, out, starts[s], lengths[s], ...)
# Launch once with the piece as a grid axis and read its offsets from a device tensor:
cu_seqlens = torch.tensor(offsets, device="cuda", dtype=torch.int32)   # n + 1 start offsets
kernel[(n, blocks)](x, out, cu_seqlens, ...)
# in the kernel:
#   piece = tl.program_id(0); start = tl.load(cu_ptr + piece); end = tl.load(cu_ptr + piece + 1)
# For torch ops: pad the pieces to one shape (or use nested tensors / a varlen kernel) and call once.
''',
    "enable_gqa": '''\
# Grouped-query attention: k, v have Hkv heads, q has H = g * Hkv. Expanding k and v first,
#   k = k.repeat_interleave(g, dim=1); v = v.repeat_interleave(g, dim=1)   # or HF repeat_kv
# copies the whole K/V (cache) g times every call and makes the kernel read it g times.
out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)   # torch >= 2.5
# Hugging Face models: attn_implementation="sdpa" or "flash_attention_2" handle GQA natively.
''',
    "freeze_params": '''\
# Fine-tuning part of a model: take the rest out of autograd, not only out of the optimizer.
backbone.requires_grad_(False)          # no .grad for it, and backward stops at the first trained layer
backbone.eval()                         # if it should not update batch-norm statistics or use dropout
optimizer = torch.optim.AdamW(head.parameters(), lr=1e-3, fused=True)
# (or run the frozen part under torch.no_grad() / torch.inference_mode() and train on its outputs)
''',
    "grads_to_none": '''\
# zero_grad(set_to_none=False) writes zeros into every gradient, and backward then adds each new
# gradient into them (read, read, write). Freed gradients cost neither: backward's first accumulation
# keeps the new gradient as it is.
optimizer.zero_grad(set_to_none=True)    # the default since torch 2.0; model.zero_grad() likewise
# Code that reads p.grad after zero_grad must allow None (`if p.grad is not None`); gradient
# accumulation over micro-batches works the same (zero once per optimizer step).
''',
    "weight_decay": '''\
# An L2 penalty summed in the loss launches a square, a sum and an add per parameter tensor, their
# backward and a second gradient accumulation per tensor: hundreds of tiny kernels every step.
#   loss = ce + wd * sum(p.pow(2).sum() for p in model.parameters())
# Its gradient is 2 * wd * p, which the optimizer's (coupled) weight_decay adds inside its own step:
loss = ce
optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=2 * wd, fused=True)  # same update
# (torch.optim.SGD(..., weight_decay=2 * wd) likewise.) Or decoupled decay, applied by the fused step:
# optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=decay, fused=True)
# A penalty on some tensors only (no biases, norms): parameter groups, {"params": ..., "weight_decay": 0}.
# To log the penalty, compute it under torch.no_grad() every N steps.
''',
    "single_backward": '''\
# One backward per task loss walks the shared layers' backward once per loss:
#   seg_loss.backward(retain_graph=True); depth_loss.backward(retain_graph=True); normal_loss.backward()
# The gradients add up either way; sum the (weighted) losses and walk the graph once:
loss = w_seg * seg_loss + w_depth * depth_loss + w_normal * normal_loss
loss.backward()
# Per-task gradients needed (gradient surgery, logging)? Take them for the heads only:
#   torch.autograd.grad(task_loss, head.parameters(), retain_graph=True)
''',
    "use_conv2d": '''\
# im2col by hand writes every k×k window into a column tensor (9× the input for a 3×3 convolution),
# casts and copies it, and backward scatters its gradient back with col2im:
#   cols = F.unfold(x, k, padding=p, stride=s); y = (w.view(out_ch, -1) @ cols).view(n, out_ch, h, w_)
# A native convolution (cuDNN implicit GEMM) reads x and the weight directly; a reparametrised
# weight (weight standardisation, spectral norm, LoRA) goes in as it is:
y = F.conv2d(x, w, bias, stride=s, padding=p, dilation=d, groups=g)
# Patches for a ViT (kernel = stride, no overlap): a Conv2d(C, D, kernel_size=P, stride=P) patch embedding.
''',
    "reduce_on_gpu": '''\
# A whole tensor crosses PCIe (to pageable memory: a staged, synchronous copy) so that the CPU can
# select or reduce it; the GPU does the same op in a fraction of the copy's time. Reduce on the GPU and
# copy only the result:
vals, ids = scores.topk(100, dim=-1)            # not scores.cpu().topk(100): 134 MB copied for 19 KB
vals, ids = vals.cpu(), ids.cpu()               # (or .to("cpu", non_blocking=True) into pinned buffers)
# likewise argmax / sort / unique / bincount / sum: .cpu() (or .item(), .tolist(), .numpy()) after them.
''',
    "static_graph_inputs": '''\
# mode="reduce-overhead" replays a CUDA graph from fixed memory: every input that is not a parameter,
# a buffer or an earlier graph's output is copied into the graph's buffers before each replay. Tensors
# whose values do not change between calls (an encoder's cross-attention K/V, a mask, a table) need not be:
torch._dynamo.mark_static_address(cross_k)     # before the first compiled call; keep the same tensor
torch._dynamo.mark_static_address(cross_v)     # (update it in place with .copy_() if it must change)
# or register them as buffers of the compiled module, or compute them inside the compiled function.
''',
    "flatten_bmm": '''\
# bmm against a weight expanded to the batch runs B small GEMMs on B views of one matrix; autocast
# materialises the B copies, and backward computes B per-item weight gradients, casts them and sums
# them over the batch. A matmul broadcasts a 2-D weight without expanding it:
y = x @ w + b                                  # x: (B, M, K), w: (K, N): one GEMM over B*M rows
# (not torch.bmm(x, w.unsqueeze(0).expand(B, -1, -1)) + b); or with an nn.Linear(K, N) applied to x.
# Its backward reads and writes one K x N weight gradient, accumulated over all B*M rows.
''',
    "sparse_format": '''\
# A COO tensor built from an edge list is uncoalesced: every torch.sparse.mm / addmm on CUDA sorts and
# merges its indices again (aten::_coalesce), converts them to 32 bits and transposes the dense operand
# for the legacy column-major SpMM. Build the matrix once, outside the loop, in CSR:
adj = torch.sparse_coo_tensor(edge_index, values, (n, n)).coalesce().to_sparse_csr()
out = torch.sparse.mm(adj, h @ w)          # or adj @ (h @ w): cuSPARSE's CSR SpMM, nothing re-sorted
# Training through it: the backward needs adj.T too; keep its CSR form as well (adj_t = adj.t().to_sparse_csr())
# in a custom autograd.Function, or use torch_sparse / PyG's SparseTensor, which caches it.
# When a tenth or more of the entries are nonzero, a dense matrix is faster than any sparse format:
adj_dense = adj.to_dense()                 # then adj_dense @ (h @ w) is one GEMM (TF32 / bf16 apply)
''',
    "sparse_grads": '''\
# A dense embedding gradient has the whole table's shape: every step zero-fills it, scatters the
# looked-up rows into it and the optimizer reads and writes every row. With sparse=True, backward
# returns only the looked-up rows and the optimizer updates only those:
emb = nn.Embedding(num_rows, dim, sparse=True)          # nn.EmbeddingBag(..., sparse=True) alike
# Optimizers that take sparse gradients: SGD (no weight decay), Adagrad, SparseAdam. Adam's moments
# move every row each step; SparseAdam updates the looked-up rows' moments only (lazy Adam). Keep the
# dense parameters in their own optimizer:
table_params = list(emb.parameters())
dense_params = [p for p in model.parameters() if all(p is not t for t in table_params)]
opt_tables = torch.optim.SparseAdam(table_params, lr=1e-3)   # or torch.optim.SGD(table_params, lr=...)
opt_dense = torch.optim.AdamW(dense_params, lr=1e-3)
''',
    "soa_layout": '''\
# An (N, F) array of structures read one field at a time: state[:, 0] is a column whose elements lie
# F elements apart, so every element-wise kernel on it loads one useful value per 32-byte sector and
# cannot vectorise. Keep each field contiguous instead (a structure of arrays):
state = torch.empty(F, N, device="cuda")      # row i is field i: state[i] is contiguous
x, y, vx, vy = state[0], state[1], state[2], state[3]
x += vx * dt                                  # contiguous, vectorised reads and writes
# (or a dict / dataclass of N-element tensors; convert an existing one once: state.T.contiguous()).
# Interleaved pairs read as t[..., ::2] / t[..., 1::2] (rotary embeddings) are the same case: rotate
# the two halves t[..., :d // 2] and t[..., d // 2:] instead.
''',
    "fuse_triton_passes": '''\
# Separate kernels for a row's max, its sum of exponentials and the normalisation read the whole input
# three times (and pass per-row statistics through global memory). One program per row does all three
# on the row it loaded once:
@triton.jit
def softmax(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)
# Rows too long for one block: loop over column blocks with an online max and sum (two reads, not three),
# or let torch.compile fuse torch.softmax / layer_norm for you.
''',
    "autotune_once": '''\
# @triton.autotune benchmarks every config again whenever its key changes: a key on a size that
# changes every call (tokens in a packed batch) re-tunes every step (an L2 flush, warm-up and timed
# runs and a device sync per config). Key it on what sets the best config, e.g. the row width:
@triton.autotune(configs=configs, key=["n_cols"])          # not key=["n_rows", "n_cols"]
@triton.jit
def add_rmsnorm(x_ptr, r_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr): ...
# If the size does matter, bucket it so that a few keys cover every call:
#   n_rows_bucket = triton.next_power_of_2(n_rows)   (pass it as a kernel argument in the key)
# and run each bucket once during warm-up. TRITON_PRINT_AUTOTUNING=1 prints every re-tune.
''',
    "distance_gemm": '''\
# ((a[:, None] - b[None]) ** 2).sum(-1) writes an N × M × D difference, squares it into another and
# reduces it. The same distances as one GEMM and an N × M result:
d2 = (a * a).sum(1, keepdim=True) - 2 * a @ b.T + (b * b).sum(1)     # squared Euclidean, (N, M)
idx = d2.argmin(1)                                                   # nearest code / neighbour
# or torch.cdist(a, b) (p=2 uses the same matrix-product form for large inputs);
# in bf16 / fp16, compute d2 in float32 (cancellation in a² − 2ab + b² when a ≈ b).
''',
    "filled_cache": '''\
# A preallocated (static) K/V cache of max_len positions, attended in full with a padding mask,
#   F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=positions <= pos)
# reads every position at every token, filled or not (and a mask rules the flash kernel out).
# Attend over the filled prefix (the same keys; the masked ones only added zero weight):
out = F.scaled_dot_product_attention(q, k_cache[:, :, :pos + 1], v_cache[:, :, :pos + 1])
# Sequences of different lengths in one batch: a kernel that takes per-sequence lengths, e.g.
#   flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths)   (flash-attn), or a paged
# cache (vLLM, SGLang); under torch.compile, slice with a bucketed length to bound recompiles.
''',
    "drop_checks": '''\
# A check read on the host (bool(t), .item()) waits for the GPU every time it runs:
#   assert (scale > 0).all();  if torch.isnan(x).any(): raise ...;  Normal(loc, scale) validating its args
# Take it out of the hot loop: check once after the loop, or keep it on the device.
torch.distributions.Distribution.set_default_validate_args(False)   # or Normal(..., validate_args=False)
torch._assert_async((scale > 0).all())    # the check stays, on the GPU: no sync (fails at the next sync)
# python -O drops plain `assert` statements
''',
    "calibration_off": '''\
# Calibration collects statistics for the scales; once the scales are loaded it has nothing left to do,
# but a quantizer left calibrating still measures every input (its range read on the host, a histogram):
#   quantizer.enable_calib(); model(batches); quantizer.load_calib_amax()   # ... and never disable_calib()
for module in model.modules():                       # pytorch-quantization / ModelOpt
    if isinstance(module, TensorQuantizer) and module._calibrator is not None:
        module.disable_calib()
        module.enable_quant()
model.apply(torch.ao.quantization.disable_observer)  # torch.ao QAT / PTQ models: observers off
''',
    "remove_weight_norm": '''\
# Weight normalisation recomputes every normed weight as g * v / ||v|| in each call; at inference the
# weights do not change: compute them once, after loading the trained weights.
from torch.nn.utils import parametrize
for module in model.modules():
    if parametrize.is_parametrized(module, "weight"):   # torch.nn.utils.parametrizations.weight_norm
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
# the older hook (torch.nn.utils.weight_norm): torch.nn.utils.remove_weight_norm(module)
''',
    "inference_mode": '''\
# Evaluation, serving or rollouts with grad mode on record an autograd graph for every forward (the
# weights require grad) that no backward ever reads. Turn it off around the loop:
with torch.inference_mode():          # or @torch.inference_mode() on the function; torch.no_grad()
    for batch in loader:              # where results must later take part in autograd
        out = model(batch)
# model.eval() alone does not: it switches dropout and batch norm, not autograd
''',
    "define_kernel_once": '''\
# A @triton.jit function defined inside the code that launches it is a new kernel object at every
# call: Triton reads and hashes its source, looks the compiled kernel up on disk and loads a module
# each time. Define it once, at module level:
@triton.jit
def my_kernel(X, Y, n, BLOCK: tl.constexpr):
    ...

def launch(x, y):
    my_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
# a kernel made by a factory (one per configuration): functools.lru_cache on the factory
''',
    "attention_plans": '''\
# cuDNN attention builds (and caches) a plan per shape; a decoding loop whose K/V length grows by one
# each token builds a new one at every token. Use backends that take any length without a plan:
from torch.nn.attention import SDPBackend, sdpa_kernel
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
    out = model.generate(...)        # or around the decoding loop
# or keep cuDNN and give it few shapes: a static cache read at a fixed length with a mask, or
# lengths padded to buckets (each bucket is planned once)
''',
    "ring_buffer_cache": '''\
# A sliding-window cache shifted one slot per token rewrites the whole window each time:
#   k_out = k_cache[:, :, indices]; k_out[:, :, -1] = k; k_cache.zero_(); k_cache += k_out
# Write the new key/value at its slot instead and attend over the buffer as it lies: keys carry
# their rotary position from before they were cached, so their order in the buffer does not matter.
slot = pos % window
k_cache.index_copy_(2, torch.tensor([slot], device=k.device), k)
v_cache.index_copy_(2, torch.tensor([slot], device=v.device), v)
out = F.scaled_dot_product_attention(q, k_cache, v_cache)   # mask the slots not yet filled while pos < window
''',
    "split_pair_linear": '''\
# A Linear over every pair's concatenation runs its GEMM on B*L*L rows and writes the pairs' tensor:
#   pair = torch.cat([h[:, :, None].expand(-1, -1, L, -1), h[:, None].expand(-1, L, -1, -1)], -1)
#   out = linear(pair)                                    # W @ [h_i; h_j] + b
# The same function with the weight split in two halves, each applied per item (B*L rows):
w_i, w_j = linear.weight.split([h.shape[-1], h.shape[-1]], dim=1)
a = h @ w_i.T                                              # B x L x out
b = h @ w_j.T + linear.bias
out = a[:, :, None] + b[:, None, :]                        # B x L x L x out, by broadcasting
''',
    "read_once": '''\
# Reading finished results item by item copies a few bytes and waits for the GPU every time:
#   for i in range(batch): hyps.append(collapse(ids[i, :lengths[i]].cpu().tolist()))
# Do the per-item work on the whole batch on the GPU, then copy once (and slice on the host):
keep = (ids != blank) & torch.cat([torch.ones_like(ids[:, :1], dtype=torch.bool), ids[:, 1:] != ids[:, :-1]], 1)
keep &= torch.arange(ids.shape[1], device=ids.device) < lengths[:, None]
flat, rows = ids[keep].cpu().numpy(), keep.sum(1).cpu().numpy()    # one copy of what is kept
hyps = [h.tolist() for h in np.split(flat, np.cumsum(rows)[:-1])]    # host slicing, no syncs
# (the same for .item() in a loop: values = t.tolist() once, then index the list)
''',
}
