"""NeRF-style rendering through a user Triton fully-fused MLP whose matrix products are broadcast multiply + `tl.sum`.

User Triton kernel. Inference: 32,768 rays x 64 samples per step (2,097,152 points) of a
NeRF-style field: frequency encoding of the sample points (xyz and 10 sin/cos octaves: 63 features,
one zero pad, bf16) in PyTorch, then one user Triton kernel that keeps each row block's activations
in registers through 4 hidden layers of 64 x 64 (ReLU, no biases, bf16 between layers, float32
sums) and a 64 -> 4 output layer (RGB + density), then volume rendering in PyTorch (sigmoid colour,
ReLU density, alpha compositing with a cumulative product). Because `tl.dot` needs every dimension
to be at least 16 and the output layer has 4 columns, the kernel's author wrote every product as
`tl.sum(h[:, :, None] * w[None, :, :], axis=1)`: CUDA-core multiply-adds on a (16, 64, 64) float32
register tensor per layer (BLOCK_M 16, 4 warps), which spills.

Variant `tl_dot`: the same kernel with `tl.dot` (bf16 inputs, float32 accumulation) at BLOCK_M 128,
the output weight zero-padded to 16 columns (4 stored).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
import triton
import triton.language as tl
from _common import CUDA, DEVICE, StepTimer, options

VARIANTS = ("tl_dot",)
if CUDA:
    RAYS, SAMPLES, DTYPE = 32768, 64, torch.bfloat16
else:
    RAYS, SAMPLES, DTYPE = 16, 16, torch.float32  # the interpreter's tl.dot needs float32
HID, HIDDEN_LAYERS, N_OUT, OCTAVES = 64, 4, 4, 10


@triton.jit
def fused_mlp(x_ptr, w_ptr, wo_ptr, out_ptr, n_rows,
              HID: tl.constexpr, LAYERS: tl.constexpr, N_OUT: tl.constexpr, OUT_PAD: tl.constexpr,
              BLOCK_M: tl.constexpr, USE_DOT: tl.constexpr):
    """out[rows, :N_OUT] = relu(...relu(x W0)...W3) Wo for one block of BLOCK_M rows."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HID)
    rmask = rows[:, None] < n_rows
    h = tl.load(x_ptr + rows[:, None] * HID + cols[None, :], mask=rmask, other=0.0)
    for layer in tl.static_range(LAYERS):
        w = tl.load(w_ptr + layer * HID * HID + cols[:, None] * HID + cols[None, :])
        if USE_DOT:
            acc = tl.dot(h, w)
        else:
            acc = tl.sum(h.to(tl.float32)[:, :, None] * w.to(tl.float32)[None, :, :], axis=1)
        h = tl.maximum(acc, 0.0).to(x_ptr.dtype.element_ty)
    ocols = tl.arange(0, OUT_PAD)
    wo = tl.load(wo_ptr + cols[:, None] * OUT_PAD + ocols[None, :])
    if USE_DOT:
        o = tl.dot(h, wo)
    else:
        o = tl.sum(h.to(tl.float32)[:, :, None] * wo.to(tl.float32)[None, :, :], axis=1)
    tl.store(out_ptr + rows[:, None] * N_OUT + ocols[None, :], o, mask=rmask & (ocols[None, :] < N_OUT))


def encode(pts: torch.Tensor) -> torch.Tensor:
    """(n, 3) -> (n, 64): xyz, sin and cos of 10 octaves, one zero column."""
    freqs = 2.0 ** torch.arange(OCTAVES, device=pts.device, dtype=pts.dtype) * torch.pi
    ang = (pts[:, :, None] * freqs).flatten(1)
    pad = torch.zeros(pts.shape[0], 1, device=pts.device, dtype=pts.dtype)
    return torch.cat((pts, ang.sin(), ang.cos(), pad), 1).to(DTYPE)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    use_dot = args.variant == "tl_dot"
    torch.manual_seed(0)
    w = (torch.randn(HIDDEN_LAYERS, HID, HID, device=DEVICE) * (2.0 / HID) ** 0.5).to(DTYPE)
    wo4 = (torch.randn(HID, N_OUT, device=DEVICE) * (1.0 / HID) ** 0.5).to(DTYPE)
    out_pad = 16 if use_dot else N_OUT
    wo = torch.zeros(HID, out_pad, device=DEVICE, dtype=DTYPE)
    wo[:, :N_OUT] = wo4
    block_m = 128 if use_dot else 16
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    pool = 4
    origins = torch.rand(pool, RAYS, 3, device=DEVICE, generator=gen) * 0.2 - 0.1
    dirs = torch.nn.functional.normalize(torch.randn(pool, RAYS, 3, device=DEVICE, generator=gen), dim=-1)
    t = torch.linspace(0.05, 1.0, SAMPLES, device=DEVICE)
    delta = torch.cat((t[1:] - t[:-1], torch.full((1,), 1e10, device=DEVICE)))
    n = RAYS * SAMPLES
    raw = torch.empty(n, N_OUT, device=DEVICE, dtype=torch.float32)
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            j = i % pool
            pts = origins[j][:, None, :] + dirs[j][:, None, :] * t[None, :, None]
            x = encode(pts.reshape(n, 3))
            fused_mlp[(triton.cdiv(n, block_m),)](x, w, wo, raw, n, HID=HID, LAYERS=HIDDEN_LAYERS, N_OUT=N_OUT,
                                                  OUT_PAD=out_pad, BLOCK_M=block_m, USE_DOT=use_dot, num_warps=4)
            r = raw.view(RAYS, SAMPLES, N_OUT)
            rgb, sigma = torch.sigmoid(r[..., :3]), torch.relu(r[..., 3])
            alpha = 1.0 - torch.exp(-sigma * delta)
            trans = torch.cumprod(torch.cat((torch.ones_like(alpha[:, :1]), 1.0 - alpha + 1e-10), 1), 1)[:, :-1]
            color = ((alpha * trans)[..., None] * rgb).sum(1)
            total += color.mean()
            timer.end()
    timer.report(f"triton_nerf_mlp variant={args.variant or 'baseline'} mean colour {total.item() / args.steps:.6f}")


if __name__ == "__main__":
    main()
