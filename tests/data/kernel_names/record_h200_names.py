"""Record many H200 kernel names under torch.profiler (tests/data/kernel_names/h200_torch211.json.gz).

The trace was recorded with this script (laid out one statement per line afterwards) on an H200
with torch 2.11.0+cu130 and triton 3.6.0:
    OUT=/some/dir python3 record_h200_names.py && gzip -9 /some/dir/h200_names.json
The ops cover GEMM (bf16, fp32, TF32, GEMV-shaped, batched), every SDPA backend forward and backward,
convolution (fp32, bf16), norms, softmax, losses, embedding, copies/casts, reductions, sort/top-k,
indexing, memcpy/memset, optimizers, an Inductor-compiled function and two user Triton kernels.
"""

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        w = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, w)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def gemms(a, b):
    a32, b32 = a.float(), b.float()
    a @ b
    torch.addmm(a[0], a, b)
    torch.bmm(a.view(16, 256, 4096)[:, :, :256], b.view(16, 256, 4096)[:, :, :256].transpose(1, 2))
    a32 @ b32
    torch.backends.cuda.matmul.allow_tf32 = True
    a32 @ b32
    torch.backends.cuda.matmul.allow_tf32 = False
    x1 = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    F.linear(x1, a)
    F.linear(x1.float(), a32)
    F.linear(torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16), a, a[0])


def attention():
    q = torch.randn(4, 16, 1024, 128, device="cuda", dtype=torch.bfloat16)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        try:
            with sdpa_kernel(backend):
                qq = q.clone().requires_grad_(True)
                F.scaled_dot_product_attention(qq, q, q, is_causal=True).sum().backward()
        except RuntimeError as exc:
            print("sdpa", backend, exc)


def convolutions():
    img = torch.randn(8, 64, 56, 56, device="cuda")
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
    conv(img).sum().backward()
    with torch.autocast("cuda", torch.bfloat16):
        conv(img)
    torch.nn.BatchNorm2d(64).cuda()(img)
    F.group_norm(img, 8)
    F.max_pool2d(img, 2)
    F.adaptive_avg_pool2d(img, 1)
    F.interpolate(img, scale_factor=2)


def rows(h):
    (F.layer_norm(h, (1024,)).sum() + F.rms_norm(h, (1024,)).sum()).backward()
    F.softmax(h, -1)
    F.log_softmax(h.float(), -1)
    F.gelu(h)
    F.silu(h)
    F.dropout(h, 0.1)
    logits = torch.randn(512, 50257, device="cuda", requires_grad=True)
    F.cross_entropy(logits, torch.randint(0, 50257, (512,), device="cuda")).backward()
    emb = torch.nn.Embedding(50257, 768).cuda()
    emb(torch.randint(0, 50257, (8, 128), device="cuda")).sum().backward()


def data_movement(h):
    torch.cat([h, h])
    h.t().contiguous()
    h.to(torch.float32)
    h.float().half()
    h.sum()
    h.mean(-1)
    h.max(-1)
    h.argmax(-1)
    torch.topk(h.float(), 5)
    torch.sort(h[0].float())
    torch.cumsum(h.float(), 0)
    idx = torch.randint(0, 4096, (1024,), device="cuda")
    h.index_select(0, idx)
    torch.gather(h, 0, idx[:, None].expand(-1, 1024))
    z = torch.zeros_like(h)
    z.scatter_add_(0, idx[:, None].expand(-1, 1024), h.detach()[:1024])
    torch.where(h > 0, h, z)
    torch.nonzero(h[:8] > 0)
    h.detach().zero_()
    h.detach().fill_(1.0)
    cpu = torch.randn(1024, 1024)
    cpu.cuda()
    cpu.pin_memory().cuda(non_blocking=True)
    h.cpu()


def optimizers_and_triton(a, b, compiled, h):
    params = [torch.nn.Parameter(torch.randn(1024, 1024, device="cuda")) for _ in range(4)]
    for p in params:
        p.grad = torch.randn_like(p)
    torch.optim.AdamW(params, fused=True).step()
    torch.optim.AdamW(params, foreach=True).step()
    torch.optim.SGD(params, lr=0.1).step()
    xs = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(xs)
    add_kernel[(256,)](xs, xs, out, 1 << 20, BLOCK=4096)
    c = torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16)
    aa, bb = a[:1024, :1024].contiguous(), b[:1024, :1024].contiguous()
    matmul_kernel[(16, 16)](aa, bb, c, 1024, 1024, 1024, BM=64, BN=64, BK=64)
    compiled(h.detach(), a[:1024, :1024])


def work(compiled):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    gemms(a, b)
    attention()
    convolutions()
    h = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    rows(h)
    data_movement(h)
    optimizers_and_triton(a, b, compiled, h)
    torch.cuda.synchronize()


def fn(x, w):
    y = F.layer_norm(x, (1024,)) @ w
    return torch.softmax(y.float(), -1).sum(-1) + torch.relu(y).mean()


def main():
    compiled = torch.compile(fn)
    work(compiled)  # warm-up and compile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        work(compiled)
    prof.export_chrome_trace(os.path.join(os.environ["OUT"], "h200_names.json"))
    print("ok", torch.__version__, triton.__version__)


if __name__ == "__main__":
    main()
