"""A high-resolution ViT encoder whose attention is a user Triton flash-attention kernel launched with 16 x 16 tiles.

Segmentation-style image encoder, bf16 inference: 4 images of 1024 x 1024 cut into 16 px patches
(4,096 tokens) by a Conv2d, learned positions, 4 pre-norm blocks of width 1024 (16 heads of 64,
GELU MLP 4096), LayerNorm; global (non-causal) attention in every block through a hand-written
Triton forward kernel (online softmax over key blocks, fp32 accumulator, `tl.dot`) that reads q,
k and v straight from the fused qkv projection and writes (batch, token, head, dim). The kernel is
launched with BLOCK_M = BLOCK_N = 16 and the default 4 warps / 3 stages: 256 query blocks per
(image, head), each re-reading all keys and values with 16 x 16 x 64 products. Variant
`big_tiles`: the same kernel at BLOCK_M = 128, BLOCK_N = 64 (4 warps, 3 stages).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # the CPU check runs the kernel in Triton's interpreter

import torch.nn.functional as F
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("big_tiles",)).parse_args()
torch.manual_seed(0)
if CUDA:
    D, HEADS, LAYERS, IMG, PATCH, BATCH = 1024, 16, 4, 1024, 16, 4
    DTYPE = torch.bfloat16
else:
    D, HEADS, LAYERS, IMG, PATCH, BATCH = 64, 4, 2, (80, 48), 16, 2  # 15 tokens: partial blocks
    DTYPE = torch.float32
HD = D // HEADS
BLOCK_M, BLOCK_N = (128, 64) if args.variant == "big_tiles" else (16, 16)


@triton.jit
def flash_attn_fwd(
    Q, K, V, Out, sm_scale,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_ot, stride_oh,
    H, T,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
                mask=offs_m[:, None] < T, other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # exp2
    for start_n in range(0, T, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * stride_kt + offs_d[:, None], mask=cols[None, :] < T, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(cols[None, :] < T, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vt + offs_d[None, :], mask=cols[:, None] < T, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :],
             acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < T)


def flash_attention(qkv: torch.Tensor) -> torch.Tensor:
    """qkv (B, T, 3, H, HD) -> softmax(q k^T / sqrt(HD)) v as (B, T, H * HD)."""
    b, t = qkv.shape[:2]
    q, k, v = qkv.unbind(2)  # strided views, no copies
    out = torch.empty(b, t, HEADS, HD, device=qkv.device, dtype=qkv.dtype)
    grid = (triton.cdiv(t, BLOCK_M), b * HEADS)
    flash_attn_fwd[grid](
        q, k, v, out, HD ** -0.5,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        HEADS, t,
        HEAD_DIM=HD, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )
    return out.view(b, t, HEADS * HD)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D, eps=1e-6), nn.LayerNorm(D, eps=1e-6)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, HD)
        x = x + self.proj(flash_attention(qkv))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ImageEncoderViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        hw = IMG if isinstance(IMG, tuple) else (IMG, IMG)
        tokens = (hw[0] // PATCH) * (hw[1] // PATCH)
        self.patch_embed = nn.Conv2d(3, D, PATCH, stride=PATCH)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, D) * 0.02)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D, eps=1e-6)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


with torch.device(DEVICE):
    model = ImageEncoderViT()
model = model.to(DTYPE).eval()
hw = IMG if isinstance(IMG, tuple) else (IMG, IMG)
gen = torch.Generator(device=DEVICE).manual_seed(1)
images = torch.randn(2, BATCH, 3, *hw, generator=gen, device=DEVICE).to(DTYPE)

check = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for i in range(args.steps):
        timer.tick()
        feats = model(images[i % 2])
        check += feats.float().mean(1).abs().sum()
        timer.end()
timer.report(f"triton_flash_tiles variant={args.variant or 'baseline'} feature checksum {check.item() / args.steps:.4f}")
