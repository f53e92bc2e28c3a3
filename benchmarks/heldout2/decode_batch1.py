"""Greedy decoding at batch 1 with a hand-written Llama-style decoder (RMSNorm, separate q/k/v and
gate/up projections, SiLU MLP) over a static KV cache, one token per Python call: a few hundred small
kernels per token, GEMVs reading the weights.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout2/decode_batch1.py
Variants: --variant cuda_graph (one token's step captured once in a CUDA graph and replayed per
token; on the CPU it runs eagerly), --variant fused_proj (q/k/v as one Linear and gate/up as one
Linear, eager). On the GPU: 12 layers, width 2048, 16 heads, FFN 5632, vocab 32,000, bf16, 16 tokens
per step. Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w


class Layer(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, fused: bool) -> None:
        super().__init__()
        self.heads, self.fused, self.dim, self.ffn = heads, fused, dim, ffn
        self.n1, self.n2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
        self.wo = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)
        if fused:  # the same weights, concatenated
            self.register_buffer("wqkv", torch.cat([self.wq.weight, self.wk.weight, self.wv.weight]).detach())
            self.register_buffer("wgu", torch.cat([self.gate.weight, self.up.weight]).detach())

    def forward(self, x: torch.Tensor, ck: torch.Tensor, cv: torch.Tensor, pos: torch.Tensor,
                valid: torch.Tensor) -> torch.Tensor:
        hd = self.dim // self.heads
        h = rms(x, self.n1)
        if self.fused:
            q, k, v = F.linear(h, self.wqkv).split(self.dim, dim=-1)
        else:
            q, k, v = self.wq(h), self.wk(h), self.wv(h)
        q, k, v = (t.view(1, self.heads, 1, hd) for t in (q, k, v))
        ck.index_copy_(2, pos, k)
        cv.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, ck, cv, attn_mask=valid)
        x = x + self.wo(a.reshape(1, self.dim))
        h = rms(x, self.n2)
        if self.fused:
            g, u = F.linear(h, self.wgu).split(self.ffn, dim=-1)
        else:
            g, u = self.gate(h), self.up(h)
        return x + self.down(F.silu(g) * u)


class Decoder(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, layers: int, vocab: int, max_len: int, fused: bool) -> None:
        super().__init__()
        self.emb, self.pos_emb = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.layers = nn.ModuleList([Layer(dim, heads, ffn, fused) for _ in range(layers)])
        self.norm = nn.Parameter(torch.ones(dim))
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        self.register_buffer("ck", torch.zeros(layers, 1, heads, max_len, hd))
        self.register_buffer("cv", torch.zeros(layers, 1, heads, max_len, hd))
        self.register_buffer("arange", torch.arange(max_len))

    def forward(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """One token: tok (1,) and pos (1,) on the device; returns the next token id (1,)."""
        x = self.emb(tok) + self.pos_emb(pos)
        valid = (self.arange <= pos).view(1, 1, 1, -1)
        for i, layer in enumerate(self.layers):
            x = layer(x, self.ck[i], self.cv[i], pos, valid)
        return self.head(rms(x, self.norm)).argmax(-1)


def main() -> None:
    args = options(__doc__, ("cuda_graph", "fused_proj")).parse_args()
    dim, heads, ffn, layers, vocab, per_step = (2048, 16, 5632, 12, 32000, 16) if CUDA else (64, 4, 128, 2, 500, 4)
    max_len = per_step * (args.steps + 1) + 8
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch.manual_seed(0)
    with torch.device(DEVICE):  # initialised on the device (750M weights)
        model = Decoder(dim, heads, ffn, layers, vocab, max_len, args.variant == "fused_proj")
    model = model.to(dtype).eval()
    tok = torch.ones(1, dtype=torch.long, device=DEVICE)
    pos = torch.zeros(1, dtype=torch.long, device=DEVICE)
    generated = []
    with torch.inference_mode():
        if args.variant == "cuda_graph" and CUDA:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(tok, pos)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                nxt = model(tok, pos)
                tok_next = nxt

            def one() -> torch.Tensor:
                graph.replay()
                return tok_next
        else:

            def one() -> torch.Tensor:
                return model(tok, pos)

        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(per_step):
                nxt = one()
                generated.append(nxt.clone())
                tok.copy_(nxt)
                pos.add_(1)
            timer.end()
        ids = torch.cat(generated)
    timer.report(f"decode_batch1 variant={args.variant or 'baseline'} tokens {len(ids)} "
                 f"checksum {int(ids.sum().item())} last {ids[-4:].tolist()}")


if __name__ == "__main__":
    main()
