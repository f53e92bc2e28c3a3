"""A small Llama-style decoder trained in bf16 with hand-written RMSNorm, SwiGLU, RoPE and a
cross-entropy over fp32 logits: each of those is a chain of small elementwise/reduction kernels.

Run: tracekit profile --warmup 3 sample_traces/scripts/train_llm.py --steps 9            (unfused chains)
     tracekit profile --warmup 3 sample_traces/scripts/train_llm.py --steps 9 --fused    (fused kernels)
The pair of the fused_llm_kernels rule: 4 layers, width 1024, 16 heads, SwiGLU hidden 2816, vocab
32000, batch 4 × 1024 tokens, SDPA (is_causal) attention, AdamW(fused=True), parameters in bf16.
--fused compiles each of the four chains alone with torch.compile (RMSNorm, SwiGLU's silu(gate) × up,
RoPE, and the logits' fp32 cast + cross-entropy), Liger-style: one or two fused kernels per chain,
forward and backward, while the GEMMs and attention stay as they are. Steps are marked by tracekit's
optimizer.step() hook (the first steps compile). Without CUDA it runs tiny sizes on the CPU.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """HF Llama's RMSNorm: in fp32, back to the input dtype, times the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's rotate_half form: x · cos + rotate_half(x) · sin."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


OPS = {"rms_norm": rms_norm, "swiglu": swiglu, "rope": rope, "loss": loss_fn}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = OPS["rms_norm"](x, self.n1)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = OPS["rope"](q, cos, sin), OPS["rope"](k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = OPS["rms_norm"](x, self.n2)
        return x + self.down(OPS["swiglu"](self.gate(h), self.up(h)))


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, hidden: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(dim))
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(OPS["rms_norm"](x, self.norm))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fused", action="store_true", help="torch.compile each chain (Liger-style fused kernels)")
    p.add_argument("--steps", type=int, default=9)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    vocab, dim, heads, hidden, layers, batch, seq = ((32000, 1024, 16, 2816, 4, 4, 1024) if cuda
                                                     else (512, 64, 4, 128, 2, 2, 32))
    if args.fused:
        for name, fn in list(OPS.items()):
            OPS[name] = torch.compile(fn, fullgraph=True)
    torch.manual_seed(0)
    model = Model(vocab, dim, heads, hidden, layers, seq).to(device, torch.bfloat16 if cuda else torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    labels = torch.roll(ids, -1, dims=1)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = OPS["loss"](model(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(t0)
    if cuda:
        torch.cuda.synchronize()
    end = time.perf_counter()
    steady = [*times[3:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = "fused chains" if args.fused else "unfused chains"
    print(f"{kind}: loss {loss.item():.4f}; mean step time over steps 3..{args.steps - 1}: {per * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
