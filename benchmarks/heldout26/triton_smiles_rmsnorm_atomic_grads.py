"""SMILES language-model pretraining whose user Triton RMSNorm backward adds every row's weight gradient with atomics.

A small chemical language model (causal decoder over SMILES tokens: 6 pre-norm blocks of width
512, 8 heads of 64 with QK-norm as in OLMo-2 / Gemma 3, GELU MLPs of 2,048, vocabulary of 512;
64 molecules x 512 tokens per step, bf16 autocast, fused AdamW) whose RMSNorms, the hidden ones
(32,768 rows of 512) and the per-head query and key norms (262,144 rows of 64), are the user's
Triton kernels inside a `torch.autograd.Function`: a forward of one program per row (as in Triton's
layer-norm tutorial) and a backward that computes each row's input gradient.

Baseline: the backward is one program per row too, and each program adds its row's contribution
to the weight gradient with `tl.atomic_add(dw_ptr + cols, dy * x_hat)`: 16.8 M float32 atomics per
norm, all on the same 512 (hidden) or 64 (query / key) addresses, so the updates of 32,768 or
262,144 rows queue one after another on a few L2 lines.

Variant `partial_sum_grads`: the weight gradient reduced without contention, the way Triton's
layer-norm tutorial and fused-norm libraries do it: a fixed number of programs (4 per SM) each walk
a strided set of row tiles (~4,096 elements per tile: 8 rows of 512 or 64 rows of 64), keep their
partial sums of `dy * x_hat` in registers and store them once; `partials.sum(0)` adds the
(programs x N) partials. The same per-row arithmetic for the input gradients (row sums possibly
reduced in another order); the weight gradients summed in another order (last float32 bits; the
baseline's atomics are not even deterministic from run to run).
"""

import os

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # the CPU check runs the kernels in Triton's interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton
import triton.language as tl
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("partial_sum_grads",)
if CUDA:
    LAYERS, DIM, HEADS, VOCAB, MOLECULES, LENGTH = 6, 512, 8, 512, 64, 512
    PROGRAMS = 4 * torch.cuda.get_device_properties(0).multi_processor_count
else:  # a tiny CPU check of the script
    LAYERS, DIM, HEADS, VOCAB, MOLECULES, LENGTH = 1, 32, 2, 64, 2, 16
    PROGRAMS = 4
POOL, EPS = 4, 1e-6


@triton.jit
def rmsnorm_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def rmsnorm_bwd_atomic(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, dw_ptr, n_cols, BLOCK: tl.constexpr):
    """Baseline: one program per row; dw accumulated with atomics."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat = x * rstd
    wdy = w * dy
    c = tl.sum(x_hat * wdy, axis=0) / n_cols
    tl.store(dx_ptr + row * n_cols + cols, ((wdy - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
    tl.atomic_add(dw_ptr + cols, dy * x_hat, mask=mask)


@triton.jit
def rmsnorm_bwd_partial(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, part_ptr, n_rows, n_cols,
                        BLOCK_M: tl.constexpr, BLOCK: tl.constexpr):
    """Variant: each program takes tiles of BLOCK_M rows, pid, pid + P, ...; dw partial sums kept in registers."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    cmask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK_M, n_rows, tl.num_programs(0) * BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        offs = rows[:, None] * n_cols + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
        x_hat = x * rstd[:, None]
        wdy = w[None, :] * dy
        c = tl.sum(x_hat * wdy, axis=1) / n_cols
        tl.store(dx_ptr + offs, ((wdy - x_hat * c[:, None]) * rstd[:, None]).to(dx_ptr.dtype.element_ty), mask=mask)
        acc += tl.sum(dy * x_hat, axis=0)
    tl.store(part_ptr + pid * n_cols + cols, acc, mask=cmask)


class TritonRMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, partial: bool) -> torch.Tensor:  # type: ignore[override]
        n = x.shape[-1]
        x2 = x.reshape(-1, n).contiguous()
        y = torch.empty_like(x2)
        rstd = torch.empty(x2.shape[0], device=x.device, dtype=torch.float32)
        block = triton.next_power_of_2(n)
        rmsnorm_fwd[(x2.shape[0],)](x2, weight, y, rstd, n, EPS, BLOCK=block, num_warps=4 if block >= 512 else 1)
        ctx.save_for_backward(x2, weight, rstd)
        ctx.partial, ctx.block = partial, block
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:  # type: ignore[override]
        x2, weight, rstd = ctx.saved_tensors
        rows, n = x2.shape
        dy2 = dy.reshape(rows, n).contiguous()
        dx = torch.empty_like(x2)
        warps = 4 if ctx.block >= 512 else 1
        if ctx.partial:
            block_m = max(1, 4096 // ctx.block)  # tiles of ~4,096 elements
            programs = min(triton.cdiv(rows, block_m), PROGRAMS)
            part = torch.empty(programs, n, device=x2.device, dtype=torch.float32)
            rmsnorm_bwd_partial[(programs,)](x2, weight, dy2, rstd, dx, part, rows, n, BLOCK_M=block_m,
                                             BLOCK=ctx.block, num_warps=4)
            dw = part.sum(0)
        else:
            dw = torch.zeros(n, device=x2.device, dtype=torch.float32)
            rmsnorm_bwd_atomic[(rows,)](x2, weight, dy2, rstd, dx, dw, n, BLOCK=ctx.block, num_warps=warps)
        return dx.view(dy.shape), dw.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, n: int, partial: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.partial = partial

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TritonRMSNormFn.apply(x, self.weight, self.partial)  # type: ignore[no-any-return]


class Block(nn.Module):
    """Pre-norm causal attention with QK-norm, and a GELU MLP; every norm is the Triton RMSNorm."""

    def __init__(self, partial: bool) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(DIM, partial), RMSNorm(DIM, partial)
        self.qn, self.kn = RMSNorm(DIM // HEADS, partial), RMSNorm(DIM // HEADS, partial)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.up, self.down = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).unbind(2)
        q, k = self.qn(q), self.kn(k)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class SmilesLM(nn.Module):
    def __init__(self, partial: bool) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Parameter(torch.randn(LENGTH, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(partial) for _ in range(LAYERS))
        self.norm, self.head = RMSNorm(DIM, partial), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SmilesLM(args.variant == "partial_sum_grads")
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(DEVICE).manual_seed(1)
    # tokenised SMILES strings: a skewed token distribution (C, c, O, N, brackets, ring digits, ...)
    freq = 1.0 / torch.arange(1, VOCAB + 1, device=DEVICE, dtype=torch.float32)
    data = torch.multinomial(freq, POOL * MOLECULES * (LENGTH + 1), replacement=True, generator=gen)
    data = data.view(POOL, MOLECULES, LENGTH + 1)

    def loss_of(i: int) -> torch.Tensor:
        batch = data[i % POOL]
        with bf16():
            logits = model(batch[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    train("triton_smiles_rmsnorm_atomic_grads", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
