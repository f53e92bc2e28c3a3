"""Flux-style DiT denoising whose user Triton RoPE kernel is defined inside the function that launches it.

Workload: one Euler step per step of a Flux-style MMDiT denoiser (width 2048, 16 heads of 128; 2
double-stream blocks with separate image / text weights and joint attention, then 2 single-stream
blocks with fused qkv + MLP; adaLN modulation from the time and pooled-text vector, RMS QK-norm;
456M weights, bf16, inference mode) on 2 latents of 16 x 64 x 64 (2 x 2 patches: 1,024 image
tokens) with 256 text tokens of T5 width 4,096 (random features, as a text encoder would give).
Rotary position embedding is a user Triton kernel applied in place to q and k of the joint
sequence (one program per (token, head) row, rotate-half, float32 math), one launch per block.
The kernel is written inside `apply_rope`, the wrapper that launches it (`@triton.jit` on a nested
`def`), so every call builds a new `JITFunction`: its source is read and parsed, hashed with its
dependencies, looked up in Triton's on-disk cache, and the cached binary is loaded as a new module
with a new launcher before the launch; Triton's in-memory kernel cache belongs to the `JITFunction`
object, which is thrown away after the call.

Variant `module_kernel`: the same kernel defined once at module level; after the first call every
launch finds its compiled kernel in that object's cache. The same values.

No extra variant (the kernel object is created inside the call: a capture or a dynamo trace would
have to create it too).

Without CUDA the kernel runs in Triton's interpreter (`TRITON_INTERPRET=1`) at tiny sizes.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import math
from collections.abc import Callable

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, DOUBLE, SINGLE, IMG_TOKENS, TXT_TOKENS, BATCH, TXT_DIM, VEC_DIM = 2048, 16, 2, 2, 1024, 256, 2, 4096, 768
else:
    DIM, HEADS, DOUBLE, SINGLE, IMG_TOKENS, TXT_TOKENS, BATCH, TXT_DIM, VEC_DIM = 64, 4, 1, 1, 16, 8, 1, 32, 16
HEAD_DIM = DIM // HEADS
LATENT_CH, PATCH = 16, 2
IN_DIM = LATENT_CH * PATCH * PATCH
SEQ = TXT_TOKENS + IMG_TOKENS
DTYPE = torch.bfloat16 if CUDA else torch.float32
RopeFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate q and k ((B, L, H, D), contiguous) in place; cos / sin (L, D / 2) float32. The baseline's
    wrapper: the kernel is defined here, so each call makes (and compiles or loads) a new kernel object."""

    @triton.jit
    def rope_kernel(Q, K, COS, SIN, n_heads, seq_len, HALF: tl.constexpr):
        row = tl.program_id(0)  # one (batch, token, head) row of HEAD_DIM values
        pos = (row // n_heads) % seq_len
        offs = tl.arange(0, HALF)
        cos = tl.load(COS + pos * HALF + offs)
        sin = tl.load(SIN + pos * HALF + offs)
        base = row * 2 * HALF + offs
        q1 = tl.load(Q + base).to(tl.float32)
        q2 = tl.load(Q + base + HALF).to(tl.float32)
        tl.store(Q + base, (q1 * cos - q2 * sin).to(Q.dtype.element_ty))
        tl.store(Q + base + HALF, (q2 * cos + q1 * sin).to(Q.dtype.element_ty))
        k1 = tl.load(K + base).to(tl.float32)
        k2 = tl.load(K + base + HALF).to(tl.float32)
        tl.store(K + base, (k1 * cos - k2 * sin).to(K.dtype.element_ty))
        tl.store(K + base + HALF, (k2 * cos + k1 * sin).to(K.dtype.element_ty))

    b, seq, heads, d = q.shape
    rope_kernel[(b * seq * heads,)](q, k, cos, sin, heads, seq, HALF=d // 2)


@triton.jit
def rope_kernel_module(Q, K, COS, SIN, n_heads, seq_len, HALF: tl.constexpr):
    """The same kernel, defined once."""
    row = tl.program_id(0)
    pos = (row // n_heads) % seq_len
    offs = tl.arange(0, HALF)
    cos = tl.load(COS + pos * HALF + offs)
    sin = tl.load(SIN + pos * HALF + offs)
    base = row * 2 * HALF + offs
    q1 = tl.load(Q + base).to(tl.float32)
    q2 = tl.load(Q + base + HALF).to(tl.float32)
    tl.store(Q + base, (q1 * cos - q2 * sin).to(Q.dtype.element_ty))
    tl.store(Q + base + HALF, (q2 * cos + q1 * sin).to(Q.dtype.element_ty))
    k1 = tl.load(K + base).to(tl.float32)
    k2 = tl.load(K + base + HALF).to(tl.float32)
    tl.store(K + base, (k1 * cos - k2 * sin).to(K.dtype.element_ty))
    tl.store(K + base + HALF, (k2 * cos + k1 * sin).to(K.dtype.element_ty))


def apply_rope_module(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    b, seq, heads, d = q.shape
    rope_kernel_module[(b * seq * heads,)](q, k, cos, sin, heads, seq, HALF=d // 2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.scale


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (DIM,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pe: tuple[torch.Tensor, torch.Tensor],
              rope_fn: RopeFn) -> torch.Tensor:
    """q, k, v (B, L, H, D) -> (B, L, H * D): RoPE on q and k (the Triton kernel), SDPA."""
    rope_fn(q, k, *pe)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).reshape(q.shape[0], q.shape[1], DIM)


class StreamWeights(nn.Module):
    """One stream of a double-stream block: modulation, qkv, QK-norm, projection, MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.mod = nn.Linear(DIM, 6 * DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.q_norm, self.k_norm = RMSNorm(HEAD_DIM), RMSNorm(HEAD_DIM)
        self.mlp_in, self.mlp_out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)


class DoubleBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.img, self.txt = StreamWeights(), StreamWeights()

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: tuple[torch.Tensor, torch.Tensor],
                rope_fn: RopeFn) -> tuple[torch.Tensor, torch.Tensor]:
        qs, ks, vs, mods = [], [], [], []
        for x, w in ((txt, self.txt), (img, self.img)):
            m = w.mod(F.silu(vec)).chunk(6, dim=-1)
            b, n, _ = x.shape
            q, k, v = w.qkv(modulate(x, m[0], m[1])).view(b, n, 3, HEADS, HEAD_DIM).unbind(2)
            qs.append(w.q_norm(q))
            ks.append(w.k_norm(k))
            vs.append(v)
            mods.append(m)
        a = attention(torch.cat(qs, 1), torch.cat(ks, 1), torch.cat(vs, 1), pe, rope_fn)
        outs = []
        for x, w, m, part in ((txt, self.txt, mods[0], a[:, :TXT_TOKENS]), (img, self.img, mods[1], a[:, TXT_TOKENS:])):
            x = x + m[2][:, None] * w.proj(part)
            x = x + m[5][:, None] * w.mlp_out(F.gelu(w.mlp_in(modulate(x, m[3], m[4])), approximate="tanh"))
            outs.append(x)
        return outs[1], outs[0]


class SingleBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mod = nn.Linear(DIM, 3 * DIM)
        self.linear1 = nn.Linear(DIM, 3 * DIM + 4 * DIM)
        self.linear2 = nn.Linear(DIM + 4 * DIM, DIM)
        self.q_norm, self.k_norm = RMSNorm(HEAD_DIM), RMSNorm(HEAD_DIM)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: tuple[torch.Tensor, torch.Tensor],
                rope_fn: RopeFn) -> torch.Tensor:
        shift, scale, gate = self.mod(F.silu(vec)).chunk(3, dim=-1)
        qkv, mlp = self.linear1(modulate(x, shift, scale)).split([3 * DIM, 4 * DIM], dim=-1)
        b, n, _ = x.shape
        q, k, v = qkv.view(b, n, 3, HEADS, HEAD_DIM).unbind(2)
        a = attention(self.q_norm(q), self.k_norm(k), v, pe, rope_fn)
        return x + gate[:, None] * self.linear2(torch.cat([a, F.gelu(mlp, approximate="tanh")], -1))


class FluxStyleDiT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.img_in, self.txt_in = nn.Linear(IN_DIM, DIM), nn.Linear(TXT_DIM, DIM)
        self.time_in = nn.Sequential(nn.Linear(256, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.vector_in = nn.Sequential(nn.Linear(VEC_DIM, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.double_blocks = nn.ModuleList(DoubleBlock() for _ in range(DOUBLE))
        self.single_blocks = nn.ModuleList(SingleBlock() for _ in range(SINGLE))
        self.final_mod, self.final = nn.Linear(DIM, 2 * DIM), nn.Linear(DIM, IN_DIM)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, t: torch.Tensor, pooled: torch.Tensor,
                pe: tuple[torch.Tensor, torch.Tensor], rope_fn: RopeFn) -> torch.Tensor:
        freqs = torch.exp(-math.log(10000.0) * torch.arange(128, device=img.device, dtype=torch.float32) / 128)
        args = 1000.0 * t.float()[:, None] * freqs[None]
        vec = self.time_in(torch.cat([torch.cos(args), torch.sin(args)], -1).to(img.dtype)) + self.vector_in(pooled)
        img, txt = self.img_in(img), self.txt_in(txt)
        for block in self.double_blocks:
            img, txt = block(img, txt, vec, pe, rope_fn)
        x = torch.cat([txt, img], 1)
        for block in self.single_blocks:
            x = block(x, vec, pe, rope_fn)
        shift, scale = self.final_mod(F.silu(vec)).chunk(2, dim=-1)
        return self.final(modulate(x[:, TXT_TOKENS:], shift, scale))


def main() -> None:
    args = options(__doc__, ("module_kernel",)).parse_args()
    rope_fn = apply_rope_module if args.variant == "module_kernel" else apply_rope
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = FluxStyleDiT()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
            nn.init.zeros_(m.bias)
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    txt = torch.randn(BATCH, TXT_TOKENS, TXT_DIM, device=DEVICE, generator=gen).to(DTYPE)
    pooled = torch.randn(BATCH, VEC_DIM, device=DEVICE, generator=gen).to(DTYPE)
    inv = 1.0 / 10000 ** (torch.arange(0, HEAD_DIM // 2, device=DEVICE, dtype=torch.float32) / (HEAD_DIM // 2))
    angles = torch.outer(torch.arange(SEQ, device=DEVICE, dtype=torch.float32), inv)
    pe = (angles.cos().contiguous(), angles.sin().contiguous())  # (SEQ, HEAD_DIM / 2), the joint sequence
    x = torch.randn(BATCH, IMG_TOKENS, IN_DIM, device=DEVICE, generator=gen).to(DTYPE)  # patchified noise
    sigmas = torch.linspace(1.0, 0.0, args.steps + 1, device=DEVICE)

    checksum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            t = sigmas[step].expand(BATCH)
            v = model(x, txt, t, pooled, pe, rope_fn)
            x = x + (sigmas[step + 1] - sigmas[step]) * v  # Euler step of the flow
            checksum += v.float().abs().mean()
            timer.end()
    timer.report(f"triton_rope_inner_jit variant={args.variant or 'baseline'} mean |velocity| "
                 f"{checksum.item() / args.steps:.6f} latent sum {x.float().sum().item():.4f}")


if __name__ == "__main__":
    main()
