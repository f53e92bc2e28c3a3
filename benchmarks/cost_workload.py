"""One call of each op tracekit's cost models cover, at sizes above the H200's L2 (validation run A).

Run on the GPU machine (docs/validation.md, "Run A"):
  python3 benchmarks/cost_workload.py            # writes $OUT/h200_ops.json.gz (record_shapes=True)
  ncu --clock-control none --nvtx --nvtx-include "measure/" \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      --csv --log-file $OUT/ncu.csv python3 benchmarks/cost_workload.py --ncu
  python benchmarks/validate_bytes.py h200_ops.json.gz ncu.csv
Two warm-up steps, then one measured step (under torch.profiler, or inside the NVTX range
`measure` for ncu). NVTX ranges are per thread, so ncu sees no kernels of the autograd thread
(the backward ops), which the trace has."""

import gzip
import os
import shutil
import sys

import torch
import torch.nn.functional as F

dev = "cuda"
ncu = "--ncu" in sys.argv
torch.manual_seed(0)
bf, f32, f16 = torch.bfloat16, torch.float32, torch.float16


def r(*shape, dt=f32):
    return torch.randn(*shape, device=dev, dtype=dt)


A32, B32 = r(4096, 4096), r(4096, 4096)
Abf, Bbf = r(8192, 8192, dt=bf), r(8192, 8192, dt=bf)
A16, B16 = r(4096, 4096, dt=f16), r(4096, 4096, dt=f16)
Wl, bl, xl = r(4096, 4096, dt=bf), r(4096, dt=bf), r(4096, 4096, dt=bf)
Ab, Bb = r(32, 1024, 1024, dt=bf), r(32, 1024, 1024, dt=bf)
Wv, xv = r(8192, 8192, dt=bf), r(1, 8192, dt=bf)
Wv32, xv32 = r(8192, 8192), r(1, 8192)
E1, E2 = r(8192, 8192), r(8192)
G = r(16384, 8192, dt=bf)
R = r(16384, 8192)
lnw, lnb = r(8192, dt=bf), r(8192, dt=bf)
BN = r(64, 256, 56, 56)
bnw, bnb, bnm, bnv = r(256), r(256), torch.zeros(256, device=dev), torch.ones(256, device=dev)
GN = r(32, 256, 56, 56, dt=bf)
S = r(8192, 8192)
emb = r(50257, 4096, dt=bf)
idx = torch.randint(0, 50257, (8, 2048), device=dev)
CT = r(8192, 8192)
logits, tgt = r(8192, 50257), torch.randint(0, 50257, (8192,), device=dev)
q, k, v = (r(8, 32, 4096, 128, dt=bf) for _ in range(3))
kg, vg = r(8, 8, 4096, 128, dt=bf), r(8, 8, 4096, 128, dt=bf)
qg = r(8, 32, 4096, 128, dt=bf).requires_grad_(True)
kq, vq = r(8, 32, 4096, 128, dt=bf).requires_grad_(True), r(8, 32, 4096, 128, dt=bf).requires_grad_(True)
X = r(64, 256, 56, 56, dt=bf)
Wc = r(256, 256, 3, 3, dt=bf)
Xl = r(8192, 4096, dt=bf).requires_grad_(True)
Wlin = r(4096, 4096, dt=bf).requires_grad_(True)
blin = r(4096, dt=bf).requires_grad_(True)
P1, P2, P3 = r(8192, 8192), r(8192, 8192), r(8192, 8192)

@torch.compile
def fused(a, b, c):
    return (a * b + c).sin()

def step():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.mm(A32, B32)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.mm(A32, B32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.mm(Abf, Bbf)
    torch.mm(A16, B16)
    F.linear(xl, Wl, bl)
    torch.bmm(Ab, Bb)
    F.linear(xv, Wv)
    F.linear(xv32, Wv32)
    E1 + E2
    F.gelu(G)
    R.sum(dim=1)
    R.amax(dim=0)
    F.layer_norm(G, (8192,), lnw, lnb)
    F.rms_norm(G, (8192,), lnw)
    F.batch_norm(BN, bnm, bnv, bnw, bnb, training=True)
    F.group_norm(GN, 32)
    torch.softmax(S, dim=-1)
    torch.log_softmax(S, dim=-1)
    F.embedding(idx, emb)
    CT.to(bf)
    CT.t().contiguous()
    torch.cat([CT, CT])
    F.cross_entropy(logits, tgt)
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    F.scaled_dot_product_attention(q, k, v)
    F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True)
    F.conv2d(X, Wc, padding=1)
    o = F.scaled_dot_product_attention(qg, kq, vq, is_causal=True)
    o.sum().backward()
    y = F.linear(Xl, Wlin, blin)
    F.layer_norm(y, (4096,)).sum().backward()
    fused(P1, P2, P3)

for _ in range(2):
    step()
torch.cuda.synchronize()
if ncu:
    torch.cuda.nvtx.range_push("measure")
    step()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
else:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    out = os.environ.get("OUT", ".")
    p = os.path.join(out, "h200_ops.json")
    prof.export_chrome_trace(p)
    with open(p, "rb") as f, gzip.open(p + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(p)
    print(torch.__version__, torch.cuda.get_device_name())
