"""Code snippets shown with each suggestion, keyed by rule id (data, not logic): the rule rows read them."""

from __future__ import annotations

from tracekit.suggestions.snippets_debug import DEBUG_SNIPPETS
from tracekit.suggestions.snippets_grid import GRID_SNIPPETS
from tracekit.suggestions.snippets_inference import INFERENCE_SNIPPETS

SNIPPETS: dict[str, str] = {
    "cuda_graphs": '''\
# Capture the step once and replay it: one launch instead of one per kernel.
# Static shapes and no host syncs inside the captured region are required.
model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs via torch.compile

# or by hand:
static_in = example_input.clone()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):                 # warm up on a side stream
    for _ in range(3):
        step(static_in)
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = step(static_in)
for batch in data:
    static_in.copy_(batch)
    graph.replay()                          # static_out now holds the result
''',
    "fuse_elementwise": '''\
# Let the compiler fuse the elementwise chain into one kernel that reads the inputs once
# and writes the result once (no intermediate tensors in memory).
@torch.compile
def fused(x, w, b, residual):
    return torch.nn.functional.gelu(x * w + b) + residual

# or compile the module that contains the chain:
model = torch.compile(model)
''',
    "batch_bmm": '''\
# One batched GEMM instead of a Python loop of small ones (iterations must be independent).
# before:
for i in range(n):
    c[i] = a[i] @ b[i]
# after: a is (n, M, K), b is (n, K, N)
c = torch.bmm(a, b)                 # or torch.matmul / torch.einsum("nmk,nkn->nmn", a, b)

# An ensemble of k same-shape models called one by one: stack their weights, run each layer once.
from torch.func import functional_call, stack_module_state
params, buffers = stack_module_state(list(members))          # each leaf: (k, ...) — train these
base = copy.deepcopy(members[0]).to("meta")
def one(p, b, x): return functional_call(base, (p, b), (x,))
out = torch.vmap(one, in_dims=(0, 0, None))(params, buffers, x)   # (k, batch, ...): one bmm per layer
# or by hand: w (k, in, out), b (k, 1, out); h = torch.baddbmm(b, h, w) per layer, h = x.expand(k, -1, -1)

# Attention heads as separate modules (a ModuleList of Head, torch.cat of their outputs): one
# projection for every head's q, k and v, and one SDPA call over (B, heads, T, head_dim).
qkv = nn.Linear(d, 3 * d, bias=False)         # its rows: every head's query, then key, then value weights
q, k, v = qkv(x).view(B, T, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d)
# or nn.MultiheadAttention(d, heads, batch_first=True)
''',
    "batch_decode": '''\
# Requests decoded one at a time pay the whole forward (Python, launches, weight reads) per token each.
# Serve the waiting requests in one batched call: one forward per token for all of them.
prompts = tokenizer(texts, return_tensors="pt", padding=True).to("cuda")   # padding_side="left"
out = model.generate(**prompts, max_new_tokens=n)                          # instead of one call per text
# or a serving stack that batches for you: vLLM, TGI, SGLang (continuous batching + paged KV cache)
''',
    "batch_requests": '''\
# The same forward runs once per request at batch 1: every request pays its Python, its launches
# and its small, inefficient GEMMs. Stack the waiting requests and run one forward at batch k:
batch = torch.cat([r.input_ids for r in waiting])        # (k, seq): same length, or pad + attention mask
with torch.inference_mode():
    out = model(batch)                                   # one forward instead of k
results = out.argmax(-1).tolist()                        # one device-to-host copy for all of them
# a server: dynamic batching (TorchServe batch_size / max_batch_delay, Triton dynamic_batching)
''',
    "batch_samples": '''\
# A Python loop over the samples of the batch, each with its own number of boxes / tokens / points,
# launches the loop body's kernels once per sample. Pad to the batch maximum (or to a few bucket
# sizes) with a validity mask, once per batch (in the collate function), and run the body once:
gt = torch.nn.utils.rnn.pad_sequence(boxes, batch_first=True)          # (batch, max_boxes, 4)
valid = torch.arange(gt.shape[1], device=gt.device) < lengths[:, None]  # (batch, max_boxes)
loss = batched_loss(preds, gt, valid)        # padded entries masked out (IoU -1, weight 0, ...)
# instead of: loss = sum(image_loss(p, g) for p, g in zip(preds, boxes))
# fixed shapes per bucket also let torch.compile / CUDA graphs capture the step
''',
    "foreach_loops": '''\
# A Python loop over the parameters launches one kernel per op per tensor (and syncs at each .item()).
# before:
total = sum(p.grad.norm().item() ** 2 for p in params) ** 0.5
for p in params: p.grad.mul_(max_norm / (total + 1e-6))
for e, p in zip(ema, params): e.mul_(decay).add_(p, alpha=1 - decay)
# after: a few multi-tensor launches per op for all tensors, the norm kept on the GPU
torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
with torch.no_grad():
    torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - decay)
# other loops: torch._foreach_mul_, _foreach_add_, _foreach_copy_, _foreach_norm, _foreach_zero_ ...
''',
    "larger_batch": '''\
# The step waits on launches, syncs and Python that it pays once per step, whatever the batch.
# A larger batch shares them among more samples (the memory view estimates how much larger fits):
loader = DataLoader(dataset, batch_size=4 * batch_size, ...)   # the multiple the suggestion names
# training: fewer optimizer steps for the same samples; scale the learning rate with the batch, or
# keep the effective batch and accumulate fewer micro-batches per optimizer step
# gradient accumulation over many small micro-batches: the same samples per optimizer step in fewer,
# larger micro-batches (as large as memory allows; the step's gradient is the same):
micro = 4 * micro                                  # was: 64 micro-batches of 4 -> 16 of 16 (or 1 of 256)
for start in range(0, batch, micro):
    loss = loss_fn(model(x[start:start + micro]), y[start:start + micro]) * (micro / batch)
    loss.backward()
optimizer.step()
''',
    "lower_precision": '''\
# fp32 GEMMs run on the slow fp32 roof. TF32 keeps fp32 tensors and uses tensor cores:
torch.backends.cuda.matmul.allow_tf32 = True      # or:
torch.set_float32_matmul_precision("high")
# bf16 autocast halves the bytes too (check accuracy on your model); for a conv net it also runs the
# convolutions at the bf16 roof and the activations on bf16 tensors:
model = model.to(memory_format=torch.channels_last)   # conv nets: NHWC, no layout transposes
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(x.to(memory_format=torch.channels_last))
    loss = loss_fn(out.float(), y)
''',
    "align_dims": '''\
# Pad GEMM dimensions to multiples of 8 (fp16/bf16; 4 for fp32/TF32, 16 for fp8),
# vocabulary-sized ones to a multiple of 64, so cuBLAS can use its aligned tensor-core kernels.
def pad_to(n, multiple):
    return (n + multiple - 1) // multiple * multiple

vocab = pad_to(tokenizer_vocab_size, 64)        # e.g. 50257 -> 50304
lm_head = torch.nn.Linear(d_model, vocab, bias=False)
# extra logits: slice them off (logits[..., :tokenizer_vocab_size]) or mask them
''',
    "use_sdpa": '''\
# One fused attention kernel instead of matmul -> scale -> mask -> softmax -> matmul:
# the score matrix never goes to memory.
import torch.nn.functional as F
out = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # or attn_mask=mask
# instead of:
# scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
# scores = scores.masked_fill(~mask, float("-inf"))
# out = scores.softmax(-1) @ v
torch.backends.cuda.enable_flash_sdp(True)  # SDPA ran math: fused backends back on (mem_efficient too)
''',
    "causal_mask": '''\
# A square causal mask makes the fused kernels run every tile (and rules flash out);
# is_causal=True lets flash / cuDNN / memory-efficient skip the upper triangle.
import torch.nn.functional as F
F.scaled_dot_product_attention(q, k, v, is_causal=True)  # instead of attn_mask=causal_mask
# Not causal but structured (a sliding window, documents packed in one sequence): a block mask
# lets FlexAttention skip every fully masked tile (is_causal=True would change the result).
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
def local(b, h, q_idx, kv_idx):
    return (kv_idx <= q_idx) & (q_idx - kv_idx < WINDOW)
block_mask = create_block_mask(local, B=None, H=None, Q_LEN=L, KV_LEN=L)   # once, not per step
out = torch.compile(flex_attention)(q, k, v, block_mask=block_mask)
''',
    "avoid_sync": '''\
# .item(), .cpu(), .tolist(), nonzero() and printing a CUDA tensor wait for the GPU to drain.
# Keep values on the device inside the loop, read them once at the end:
total = torch.zeros((), device="cuda")
for batch in loader:
    loss = step(batch)
    total += loss.detach()          # was: total += loss.item()
print(total.item())                 # one sync after the loop
# data-dependent control flow: torch.where(cond, a, b) instead of `if cond.item():`
''',
    "preprocess_off_thread": '''\
# The training thread tokenizes / preprocesses in Python while the GPU waits. Move that work
# into a Dataset so DataLoader workers do it ahead of the GPU (or into a background thread):
class TextDataset(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return tokenize(self.texts[i])          # runs in a worker process
loader = torch.utils.data.DataLoader(TextDataset(texts), batch_size=64, collate_fn=collate,
                                     num_workers=4, pin_memory=True, persistent_workers=True)
for ids in loader:
    ids = ids.to("cuda", non_blocking=True)
    loss = model(ids); loss.backward(); opt.step()
# and use a compiled tokenizer: Hugging Face `tokenizers` (Rust), batched:
tok = transformers.AutoTokenizer.from_pretrained(name, use_fast=True)
ids = tok(batch_of_strings, padding=True, return_tensors="pt")["input_ids"]   # batch_encode
''',
    "pinned_memory": '''\
# Pageable host memory makes the copy synchronous and staged; pinned memory lets it run as DMA
# while the CPU keeps launching work.
loader = torch.utils.data.DataLoader(dataset, batch_size=bs, pin_memory=True, num_workers=4)
for x, y in loader:
    x = x.to("cuda", non_blocking=True)
    y = y.to("cuda", non_blocking=True)
# for your own host buffers: buf = torch.empty(shape, pin_memory=True)
''',
    "reuse_dataloader": '''\
# Build the DataLoader and its iterator once, outside the loop: the workers fork once and keep
# prefetching, instead of `next(iter(DataLoader(Subset(ds, idx), ...)))` forking and joining them per step.
index_lists = [choose_indices(step) for step in range(steps)]   # each step's sample indices
loader = torch.utils.data.DataLoader(
    dataset, batch_sampler=index_lists,   # any iterable of index lists (or a Sampler yielding them)
    num_workers=8, pin_memory=True,
    persistent_workers=True,              # workers survive the end of an epoch
    prefetch_factor=4,                    # batches prepared ahead per worker
)
batches = iter(loader)                    # once
for step in range(steps):
    x, y = next(batches)
    x = x.to("cuda", non_blocking=True)
''',
    "dataloader_workers": '''\
# Load and collate batches in worker processes while the GPU runs the previous step.
loader = torch.utils.data.DataLoader(
    dataset, batch_size=bs, shuffle=True,
    num_workers=8,               # start near the number of CPU cores per GPU
    pin_memory=True,             # faster, asynchronous host-to-device copies
    persistent_workers=True,     # keep workers between epochs
    prefetch_factor=4,           # batches prepared ahead per worker
)
''',
    "overlap_comm": '''\
# Let collectives run while compute continues:
model = torch.nn.parallel.DistributedDataParallel(
    model, bucket_cap_mb=25,      # smaller buckets start all-reduce earlier in backward
    gradient_as_bucket_view=True,
)
# FSDP: prefetch the next all-gather while this layer computes
model = FSDP(model, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True,
             limit_all_gathers=True)
# your own collectives: work = dist.all_reduce(t, async_op=True); ...compute...; work.wait()
''',
    "fused_optimizer": '''\
# One fused kernel per group of tensors updates params and optimizer state together,
# instead of several small kernels per parameter tensor (foreach=False) or per op (foreach=True).
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)   # Adam, AdamW, SGD, Adagrad
# where fused is not available (some dtypes or devices): the multi-tensor path, a few launches per op
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
''',
    "optimizer_on_gpu": '''\
# The optimizer runs where the parameters are: no fp32 host masters, no gradient copies down and
# no weight copies up, one fused kernel per group of tensors updates params, exp_avg and exp_avg_sq.
# before: masters = [p.detach().cpu() for p in model.parameters()]; AdamW(masters) on the CPU,
#         p.grad.to("cpu") for every grad, then p.copy_(master) for every weight, each step
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)   # the same hyper-parameters
loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
# Offload only where the model + its fp32 Adam state (16 B per parameter) does not fit in GPU memory.
''',
    "rank_imbalance": '''\
# A rank that arrives late at every collective makes all the others wait.
# If its DataLoader is the cause: load in worker processes, like the other ranks.
loader = torch.utils.data.DataLoader(dataset, batch_size=bs, num_workers=4, pin_memory=True,
                                     persistent_workers=True)
# If its data is bigger (uneven shards, longer sequences): balance the shards or pack the sequences.
''',
    "channels_last": '''\
# cuDNN's fast convolution kernels want NHWC: with NCHW tensors it transposes the input and
# output of every convolution (nchwToNhwcKernel / nhwcToNchwKernel). Keep the model and its
# input in channels_last and the transposes go away:
model = model.to(memory_format=torch.channels_last)
for x, y in loader:
    x = x.cuda(non_blocking=True).to(memory_format=torch.channels_last)
    loss = loss_fn(model(x), y)
# best with bf16 autocast (torch.autocast("cuda", dtype=torch.bfloat16)) on tensor-core GPUs
''',
    "quantize_weights": '''\
# Decode GEMVs at the memory roof are paced by the weight bytes: store the weights in int8 (or int4)
# and dequantize inside the GEMV: half (a quarter) of the bytes per token at the same bandwidth.
from torchao.quantization import quantize_, int8_weight_only   # or int4_weight_only(group_size=128)
quantize_(model, int8_weight_only())
model = torch.compile(model, mode="max-autotune")   # fuses the dequantization into the GEMV
# serving: vLLM with a weight-only checkpoint (AWQ / GPTQ int4, Marlin kernels). Not bitsandbytes
# on Hopper at batch 1: its int8/nf4 GEMVs are slower than bf16 there.
''',
    "fused_llm_kernels": '''\
# RMSNorm, SwiGLU, RoPE and the loss as written in eager PyTorch run as chains of small kernels,
# each one reading and writing a full activation (and fp32 logits for the loss). Fused kernels:
from liger_kernel.transformers import apply_liger_kernel_to_llama    # pip install liger-kernel
apply_liger_kernel_to_llama(rms_norm=True, swiglu=True, rope=True,
                            fused_linear_cross_entropy=True)   # before the model is built
# or compile the block functions (one fused Triton kernel per chain):
rms_norm = torch.compile(rms_norm)
''',
    "graph_breaks": '''\
# Find the breaks: compile the whole model as one graph (raises at the first break), or list them all
model = torch.compile(model, fullgraph=True)
explanation = torch._dynamo.explain(model)(example_input)   # graph_count, break_reasons
print(explanation.break_reasons)
# data-dependent Python on a tensor value breaks the graph and syncs:
#   if (x.abs().amax() > limit).item(): x = x * (limit / x.abs().amax())
scale = x.abs().amax()
x = x * torch.clamp(limit / scale, max=1.0)                  # tensor ops: no break, no sync
# or keep .item() inside the graph (the value becomes a symbolic int/float):
torch._dynamo.config.capture_scalar_outputs = True
''',
    "triton_config": '''\
# Let Triton pick the tiles, warps and stages for this problem size (benchmarked once per key):
@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
                           num_warps=w, num_stages=s)
             for bm in (64, 128, 256) for bn in (64, 128, 256) for bk in (32, 64)
             for w in (4, 8) for s in (3, 4)
             if bm * bn <= 128 * 256],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ..., BLOCK_SIZE_M: tl.constexpr, ...): ...
grid = lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
matmul_kernel[grid](a, b, c, M, N, K, ...)    # no BLOCK_* / num_warps / num_stages at the call

# A memory-bound kernel (elementwise, a norm, a reduction): larger blocks and more warps per program
@triton.autotune(
    configs=[triton.Config({"BLOCK_SIZE": b}, num_warps=w) for b in (1024, 2048, 4096, 8192) for w in (4, 8, 16)],
    key=["N"],
)
@triton.jit
def layer_norm_fwd(X, Y, W, B, stride, N, eps, BLOCK_SIZE: tl.constexpr): ...
layer_norm_fwd[(rows,)](x, y, w, b, x.stride(0), N, eps)    # BLOCK_SIZE and num_warps from the autotuner
''',
    "recompiles": '''\
# A static-shape graph recompiles for every new input shape (TORCH_LOGS=recompiles says why).
model = torch.compile(model, dynamic=True)        # one graph with symbolic sizes
# or mark the dimension that varies, once per input:  torch._dynamo.mark_dynamic(x, 1)
# or pad to a few bucket lengths, all compiled during warm-up (mask the padding):
L = -(-x.shape[1] // 256) * 256
x = torch.nn.functional.pad(x, (0, 0, 0, L - x.shape[1]))
''',
    "cudnn_rnn": '''\
# A cell stepped in Python launches its GEMMs and gate kernels once per time step and layer,
# forward and backward. nn.LSTM / nn.GRU run the whole sequence in one cuDNN call: the input
# projection of all time steps is one GEMM, the recurrent part runs step by step on the GPU.
lstm = nn.LSTM(input_size, hidden, num_layers=layers, batch_first=True)   # nn.GRU, nn.RNN alike
with torch.no_grad():                      # the same weights as the cells
    for i, cell in enumerate(cells):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, f"{name}_l{i}").copy_(getattr(cell, name))
out, (h, c) = lstm(x)                      # x: (batch, time, input_size); was: for t: h, c = cell(x[:, t], (h, c))
''',
    "concat_embeddings": '''\
# One lookup per table launches the same kernels once per table, forward and backward.
# Concatenate tables of one width and shift each feature's ids by its table's first row:
tables = [nn.EmbeddingBag(rows, dim, mode="sum") for rows in table_rows]
weight = torch.cat([t.weight.detach() for t in tables])
table = nn.EmbeddingBag.from_pretrained(weight, freeze=False, mode="sum", sparse=True)
base = torch.tensor([0, *table_rows[:-1]], device=ids.device).cumsum(0)    # each table's first row
pooled = table((ids + base.view(1, -1, 1)).flatten(0, 1)).view(ids.shape[0], -1)   # ids: (B, tables, bag)
# sparse=True: the optimizer updates only the rows looked up (torch.optim.SGD / SparseAdam).
# At scale: torchrec's EmbeddingBagCollection (FBGEMM table-batched embeddings) does this for you.
''',
    "preallocate_kv_cache": '''\
# torch.cat([cache, new], dim=2) copies the whole cache to append one position, every token, every layer.
# Allocate the cache once for the longest sequence and write each new position in place:
k_cache = torch.empty(batch, heads, max_len, head_dim, device=device, dtype=dtype)   # once, per layer
v_cache = torch.empty_like(k_cache)
k_cache[:, :, pos : pos + 1] = k          # or k_cache.index_copy_(2, positions, k)
v_cache[:, :, pos : pos + 1] = v
out = F.scaled_dot_product_attention(q, k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1])
# Length not known up front: grow the buffer by torch.cat in blocks (256 positions) only when it is full.
# Hugging Face: model.generate(..., cache_implementation="static") (transformers.StaticCache), which
# also lets torch.compile(mode="reduce-overhead") capture the decode step in a CUDA graph.
''',
    "drop_checkpointing": '''\
# Activation checkpointing re-runs each checkpointed block's forward during backward (its kernels
# and, often the larger part, its Python and dispatch again) to save the block's activations.
# When they fit in memory, call the blocks directly:
for block in blocks:
    x = block(x)                   # was: x = checkpoint(block, x, use_reentrant=False)
# short of memory for all of them? checkpoint only every k-th block:
for i, block in enumerate(blocks):
    x = checkpoint(block, x, use_reentrant=False) if i % k == 0 else block(x)
# or save the GEMM/attention outputs and recompute only the cheap ops:
# torch.utils.checkpoint.create_selective_checkpoint_contexts (or torch.compile's memory budget)
''',
    **INFERENCE_SNIPPETS,
    **GRID_SNIPPETS,
    **DEBUG_SNIPPETS,
}

# pinned_memory's device-to-host variant: a bulk .cpu() every step (a rollback snapshot, a checkpoint,
# logged activations) into fresh pageable memory, blocking the CPU while the copy crawls.
PINNED_D2H = '''\
# Allocate the host copies once, in pinned memory, and fill them without blocking:
side = torch.cuda.Stream()
host = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True) for k, v in model.state_dict().items()}
def snapshot():
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for k, v in model.state_dict().items():
            host[k].copy_(v, non_blocking=True)   # DMA at full link speed, overlaps the next step
# before the next optimizer.step() (or before reading `host`): torch.cuda.current_stream().wait_stream(side)
# A snapshot only ever restored onto the GPU can stay there (no host copy at all):
gpu = [torch.empty_like(v) for v in model.state_dict().values()]
with torch.no_grad():
    torch._foreach_copy_(gpu, list(model.state_dict().values()))
'''

# optimizer_on_gpu's DeepSpeed variant (DeepSpeedCPUAdam, ZeRO-Offload): the config moves the optimizer.
OPTIMIZER_ON_GPU_DEEPSPEED = '''\
# ds_config.json: keep the optimizer state on the GPU (FusedAdam steps there) when it fits
"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}},  # was {"device": "cpu", ...}
"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}
# Keep "device": "cpu" only if the model + its fp32 Adam state (16 B per parameter) does not fit;
# then pin_memory: true at least makes the gradient and weight copies DMA at full link speed.
'''
