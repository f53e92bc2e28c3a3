"""Greedy decode with a static KV cache, replayed from CUDA graphs: the capture inside the trace or in its own.

A small Llama-like decoder built from torch.nn (random weights, no download): token and position
embeddings, RMSNorm, q/k/v/o projections, attention as two explicit matmuls over the whole static
cache with a position mask, a SwiGLU MLP (gate/up/down) and an LM head. One decode step reads its
token from a fixed buffer and its position from an on-device counter, so one graph serves every
token. GPU: bf16, 4 layers, hidden 1024, 16 heads of 64, MLP 2816, vocabulary 8192. CPU: fp32 and
tiny (hidden 64, 2 layers), eager only (CUDA graphs need CUDA).

Two ways to record it (the runner is benchmarks/gpu/graph_traces.sh):

  inline: tracekit profile --warmup 0 -o OUT.trace.json.gz graph_decode.py inline --batch B
      one trace holding the prefill, an eager reference decode (also the capture's warm-up), the
      graph capture and the replays (ProfilerStep#1..#N, one token each).
  split:  python graph_decode.py split --batch 1 8 --out DIR
      the way serving stacks write them: one torch.profiler session per batch size around the
      warm-up and the graph capture (DIR/capture_traces/capture_bB.trace.json.gz), then one session
      around prefill + replays of every batch size's graph, alternating (DIR/exec.trace.json.gz).
      `tracekit profile` wraps one session around a whole script, so this mode drives
      torch.profiler itself, as a server does.
  piecewise: tracekit profile --warmup 0 -o OUT.trace.json.gz graph_decode.py piecewise --batch B
      attention eager, each layer's MLP captured into its own graph and replayed between the eager
      regions (as vLLM's piecewise graphs do); captures inside the trace.

`--shapes FILE` writes the model's GEMM shapes per decode step (JSON) so that tests can derive the
FLOPs of the replayed GEMMs from the model alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


PROMPT, NEW_TOKENS, WARMUP = 16, 16, 3
CAPTURE_MODE = "thread_local"  # the profiler's own threads may call CUDA while this one captures


@dataclass(frozen=True)
class Config:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_len: int = 64

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


GPU_CONFIG = Config(hidden=1024, layers=4, heads=16, ffn=2816, vocab=8192)
CPU_CONFIG = Config(hidden=64, layers=2, heads=4, ffn=176, vocab=256)


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Layer(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.q = nn.Linear(c.hidden, c.hidden, bias=False)
        self.k = nn.Linear(c.hidden, c.hidden, bias=False)
        self.v = nn.Linear(c.hidden, c.hidden, bias=False)
        self.o = nn.Linear(c.hidden, c.hidden, bias=False)
        self.gate = nn.Linear(c.hidden, c.ffn, bias=False)
        self.up = nn.Linear(c.hidden, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, *attention_args: torch.Tensor) -> torch.Tensor:
        """attention_args: pos, mask, k cache, v cache (see attention)."""
        return self.mlp(self.attention(x, *attention_args))

    def attention(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
    ) -> torch.Tensor:
        b, s, _ = x.shape
        c = self.c
        h = self.norm1(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, c.heads, c.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        kc.index_copy_(2, pos, k)  # static cache (B, heads, max_len, head_dim)
        vc.index_copy_(2, pos, v)
        att = torch.matmul(q, kc.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        o = torch.matmul(att, vc).transpose(1, 2).reshape(b, s, c.hidden)
        return x + self.o(o)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Decoder(nn.Module):
    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.pos_embed = nn.Embedding(c.max_len, c.hidden)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.register_buffer("slots", torch.arange(c.max_len), persistent=False)

    def forward(
        self, tokens: torch.Tensor, pos: torch.Tensor, cache: list[torch.Tensor]
    ) -> torch.Tensor:
        """tokens (B, S) at positions pos (S,): writes the cache, returns the last position's logits."""
        x = self.embed(tokens) + self.pos_embed(pos)
        mask = self.slots[None, :] > pos[:, None]  # (S, max_len): no attention to later slots
        for i, layer in enumerate(self.layers):
            x = layer(x, pos, mask, cache[2 * i], cache[2 * i + 1])
        return self.head(self.norm(x[:, -1]))


@dataclass
class State:
    """One batch size's static buffers: the graph reads and writes only these."""

    model: Decoder
    cache: list[torch.Tensor]
    prompt: torch.Tensor  # (B, PROMPT)
    token: torch.Tensor  # (B, 1) the last token
    pos: torch.Tensor  # (1,) the next position


def build(device: str, batch: int, c: Config | None = None, seed: int = 0) -> State:
    c = c or (GPU_CONFIG if device == "cuda" else CPU_CONFIG)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(seed)
    model = Decoder(c).to(device=device, dtype=dtype).eval()
    shape = (batch, c.heads, c.max_len, c.head_dim)
    cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(2 * c.layers)]
    prompt = torch.randint(0, c.vocab, (batch, PROMPT), device=device)
    token = torch.zeros(batch, 1, dtype=torch.long, device=device)
    pos = torch.zeros(1, dtype=torch.long, device=device)
    return State(model, cache, prompt, token, pos)


@torch.no_grad()
def prefill(s: State) -> None:
    """Run the prompt (eager): fills the cache, sets the first token and the next position."""
    positions = torch.arange(PROMPT, device=s.prompt.device)
    logits = s.model(s.prompt, positions, s.cache)
    s.token.copy_(logits.argmax(-1, keepdim=True))
    s.pos.fill_(PROMPT)


@torch.no_grad()
def decode_step(s: State) -> None:
    """One token for the whole batch; graph-safe (static buffers, on-device position)."""
    logits = s.model(s.token, s.pos, s.cache)
    s.token.copy_(logits.argmax(-1, keepdim=True))
    s.pos.add_(1)


def generate(s: State, n: int, step=decode_step) -> list[list[int]]:
    """Prefill, then n tokens through `step`: the generated ids per sequence."""
    prefill(s)
    out = []
    for _ in range(n):
        step(s)
        out.append(s.token.clone())
        mark_step()
    return torch.cat(out, dim=1).tolist()


def capture(s: State) -> torch.cuda.CUDAGraph:
    """Warm up eagerly on a side stream (as capture requires), then record one decode step."""
    prefill(s)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            decode_step(s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
        decode_step(s)
    torch.cuda.synchronize()
    return graph


def gemm_shapes(c: Config, batch: int, dtype: str) -> dict:
    """The GEMMs of one decode step, as (M, N, K) with FLOPs = 2*M*N*K (times `count` batches)."""
    rows = []
    for i in range(c.layers):
        for name, n, k in (
            ("q", c.hidden, c.hidden),
            ("k", c.hidden, c.hidden),
            ("v", c.hidden, c.hidden),
            ("o", c.hidden, c.hidden),
            ("gate", c.ffn, c.hidden),
            ("up", c.ffn, c.hidden),
            ("down", c.hidden, c.ffn),
        ):
            rows.append(
                {
                    "name": f"layers.{i}.{name}",
                    "op": "linear",
                    "count": 1,
                    "M": batch,
                    "N": n,
                    "K": k,
                }
            )
        rows.append(
            {
                "name": f"layers.{i}.scores",
                "op": "matmul",
                "count": batch * c.heads,
                "M": 1,
                "N": c.max_len,
                "K": c.head_dim,
            }
        )
        rows.append(
            {
                "name": f"layers.{i}.context",
                "op": "matmul",
                "count": batch * c.heads,
                "M": 1,
                "N": c.head_dim,
                "K": c.max_len,
            }
        )
    rows.append(
        {"name": "head", "op": "linear", "count": 1, "M": batch, "N": c.vocab, "K": c.hidden}
    )
    for r in rows:
        r["flops"] = 2 * r["count"] * r["M"] * r["N"] * r["K"]
    return {
        "batch": batch,
        "dtype": dtype,
        "config": c.__dict__,
        "head_dim": c.head_dim,
        "gemms_per_step": rows,
        "flops_per_step": sum(r["flops"] for r in rows),
    }


def write_shapes(path: str, device: str, batches: list[int]) -> None:
    c = GPU_CONFIG if device == "cuda" else CPU_CONFIG
    dtype = "bfloat16" if device == "cuda" else "float32"
    with open(path, "w") as f:
        json.dump([gemm_shapes(c, b, dtype) for b in batches], f, indent=1)


def inline(batch: int) -> None:
    """Everything in the caller's trace: prefill + eager decode, capture, then graph replays."""
    if not torch.cuda.is_available():
        print("generated:", generate(build("cpu", batch), 4))
        return
    s = build("cuda", batch)
    eager = generate(s, NEW_TOKENS)  # eager reference: the same kernels the graph will replay
    graph = capture(s)
    mark_step()
    replay = generate(s, NEW_TOKENS, step=lambda _: graph.replay())
    torch.cuda.synchronize()
    print(f"batch {batch}: graph replay equals eager decode: {replay == eager}")


@torch.no_grad()
def piecewise(batch: int) -> None:
    """Attention eager, each layer's MLP replayed from its own graph (vLLM-style piecewise graphs)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    s = build(device, batch)
    m, c = s.model, s.model.c
    dtype = next(m.parameters()).dtype
    static_in = [torch.zeros(batch, 1, c.hidden, device=device, dtype=dtype) for _ in m.layers]
    run_mlp = [lambda i=i: m.layers[i].mlp(static_in[i]) for i in range(c.layers)]
    if device == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in run_mlp:
                f()
        torch.cuda.current_stream().wait_stream(side)
        graphs, outs = [], []
        for f in run_mlp:
            graphs.append(torch.cuda.CUDAGraph())
            with torch.cuda.graph(graphs[-1], capture_error_mode=CAPTURE_MODE):
                outs.append(f())

        def mlp(i: int) -> torch.Tensor:
            graphs[i].replay()
            return outs[i]
    else:

        def mlp(i: int) -> torch.Tensor:
            return run_mlp[i]()

    def step(s: State) -> None:
        x = m.embed(s.token) + m.pos_embed(s.pos)
        mask = m.slots[None, :] > s.pos[:, None]
        for i, layer in enumerate(m.layers):
            static_in[i].copy_(layer.attention(x, s.pos, mask, s.cache[2 * i], s.cache[2 * i + 1]))
            x = mlp(i)
        s.token.copy_(m.head(m.norm(x[:, -1])).argmax(-1, keepdim=True))
        s.pos.add_(1)

    mark_step()
    print("generated:", generate(s, NEW_TOKENS if device == "cuda" else 4, step=step))


def _export(prof: torch.profiler.profile, path: str) -> None:
    """Write prof's Kineto trace to path, gzipped."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    print("wrote", path)


def _session() -> torch.profiler.profile:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=acts, record_shapes=True)


def split(batches: list[int], out: str, hidden: int | None = None) -> None:
    """One capture trace per batch size, then one execution trace replaying all the graphs."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    c = GPU_CONFIG if cuda else CPU_CONFIG
    if hidden:
        c = Config(hidden=hidden, layers=c.layers, heads=c.heads, ffn=c.ffn, vocab=c.vocab)
    states = {b: build(device, b, c) for b in batches}
    graphs = {}
    for b, s in states.items():
        with _session() as prof:
            if cuda:
                graphs[b] = capture(s)
            else:  # no graphs on CPU: record the warm-up alone
                prefill(s)
                for _ in range(WARMUP):
                    decode_step(s)
        _export(prof, os.path.join(out, "capture_traces", f"capture_b{b}.trace.json.gz"))
    if hidden:  # a capture trace for a different model: no execution trace
        return
    for s in states.values():
        prefill(s)
    if cuda:
        torch.cuda.synchronize()
    mark = torch.profiler.record_function  # ProfilerStep#N ranges, as a scheduled profiler writes
    with _session() as prof:
        with mark("ProfilerStep#0"):  # the prefills
            for s in states.values():
                prefill(s)
        for t in range(1, NEW_TOKENS + 1):  # one token of every batch size per step
            with mark(f"ProfilerStep#{t}"):
                for b, s in states.items():
                    if cuda:
                        graphs[b].replay()
                    else:
                        decode_step(s)
        if cuda:
            torch.cuda.synchronize()
    _export(prof, os.path.join(out, "exec.trace.json.gz"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["inline", "split", "piecewise"])
    p.add_argument("--batch", type=int, nargs="+", default=[1])
    p.add_argument("--out", default="graph_decode_split", help="split: output directory")
    p.add_argument(
        "--hidden",
        type=int,
        default=None,
        help="split: capture a model of this width only (a mismatched capture trace)",
    )
    p.add_argument("--shapes", default=None, help="write the GEMM shapes per step (JSON) here")
    a = p.parse_args()
    if a.shapes:
        write_shapes(a.shapes, "cuda" if torch.cuda.is_available() else "cpu", a.batch)
    if a.mode == "inline":
        inline(a.batch[0])
    elif a.mode == "piecewise":
        piecewise(a.batch[0])
    else:
        split(a.batch, a.out, a.hidden)


if __name__ == "__main__":
    main()
