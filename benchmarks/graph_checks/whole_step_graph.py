"""A whole training step captured in one CUDA graph, for three earlier held-out baselines whose first suggestion was `cuda_graphs` while the measured fix was a structural one.

    python3 benchmarks/graph_checks/whole_step_graph.py WORKLOAD [--steps N]

WORKLOAD is one of:
  l2_penalty   benchmarks/heldout8/l2_penalty.py's baseline (the L2 penalty over 150 tensors in the
               loss, bf16 autocast, Adam(fused=True), now with capturable=True)
  sgd_groups   benchmarks/heldout2/sgd_groups.py's baseline (one SGD group per tensor, foreach off)
  compile_helpers  benchmarks/heldout8/compile_helpers.py's baseline (rms_norm, rope and swiglu each
               in torch.compile inside an eager Llama-style model, AdamW(fused=True), now capturable)
  manual_adam  benchmarks/heldout3/manual_adam.py's baseline (a hand-written AdamW loop over 96
               tensors; its Python-float step size is frozen at the capture, which leaves the time
               unchanged and the numbers slightly different)
The model, data and optimizer are built as in the baseline script; after three warm-up steps on a
side stream, one step (forward, backward, optimizer) is captured (`torch.cuda.graph`, autocast with
its cache off as PyTorch's CUDA-graph notes require), then each timed step copies its batch into the
static input and replays the graph. The question it answers: does a graph deliver the saving
tracekit's `cuda_graphs` what-if predicts on these steps (many small launches), or does the
structural fix (fused/foreach optimizer, the optimizer's weight decay) win? Prints the baseline
scripts' last line: `mean step time over steps A..B: X ms` (host wall clock, no profiler).
"""

import argparse
import math
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
_common = runpy.run_path(str(HERE.parent / "heldout8" / "_common.py"))
CUDA: bool = _common["CUDA"]
DEVICE: str = _common["DEVICE"]
StepTimer = _common["StepTimer"]
encoder = _common["encoder"]


def autocast() -> "torch.autocast":
    return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)


def l2_penalty() -> tuple[Callable[[int], None], Callable[[], torch.Tensor], list[torch.Tensor]]:
    """The eighth set's l2_penalty baseline: (load batch i into the static inputs, one step)."""
    torch.manual_seed(0)
    dim, heads, layers, vocab, batch, seq, wd = 768, 12, 12, 30522, 16, 128, 1e-4
    body, head, body_params = encoder(dim, heads, layers, 2)
    tok, pos, norm = nn.Embedding(vocab, dim).to(DEVICE), nn.Embedding(seq, dim).to(DEVICE), nn.LayerNorm(dim).to(DEVICE)
    params = [*tok.parameters(), *pos.parameters(), *body_params, *norm.parameters()]
    params = list({id(p): p for p in params + list(head.parameters())}.values())
    opt = torch.optim.Adam(params, lr=1e-4, fused=True, capturable=True)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    ids = torch.randint(0, vocab, (4, batch, seq), device=DEVICE, generator=gen)
    labels = torch.randint(0, 2, (4, batch), device=DEVICE, generator=gen)
    positions = torch.arange(seq, device=DEVICE)
    s_ids, s_labels = ids[0].clone(), labels[0].clone()

    def load(i: int) -> None:
        s_ids.copy_(ids[i % 4], non_blocking=True)
        s_labels.copy_(labels[i % 4], non_blocking=True)

    def step() -> torch.Tensor:
        with autocast():
            h = body(tok(s_ids) + pos(positions))
            ce = F.cross_entropy(head(norm(h).mean(1)).float(), s_labels)
        loss = ce + wd * sum(p.pow(2).sum() for p in params)
        loss.backward()
        opt.step()
        return ce.detach()

    return load, step, params


def sgd_groups() -> tuple[Callable[[int], None], Callable[[], torch.Tensor], list[torch.Tensor]]:
    """The second set's sgd_groups baseline."""

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.relu(self.fc(self.norm(x)))

    dim, blocks, batch = 256, 96, 512
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(DEVICE)
    named = list(model.named_parameters())
    groups = [{"params": [p], "weight_decay": 1e-4 if n.endswith("fc.weight") else 0.0} for n, p in named]
    opt = torch.optim.SGD(groups, lr=1e-3, momentum=0.9, foreach=False)
    x = torch.randn(batch, dim, device=DEVICE)

    def step() -> torch.Tensor:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return (lambda i: None), step, [q for _, q in named]


def manual_adam() -> tuple[Callable[[int], None], Callable[[], torch.Tensor], list[torch.Tensor]]:
    """The third set's manual_adam baseline (its HandAdamW, its Python-float step size fixed at t)."""
    lr, (b1, b2), eps, wd = 1e-4, (0.9, 0.999), 1e-8, 0.01

    class Block(nn.Module):
        def __init__(self, dim: int) -> None:
            super().__init__()
            self.n, self.a, self.b = nn.LayerNorm(dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.b(F.gelu(self.a(self.n(x))))

    dim, blocks, tokens = 1024, 24, 4096
    torch.manual_seed(0)
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(DEVICE)
    params = list(model.parameters())
    ms, vs = [torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params]
    x, target = torch.randn(tokens, dim, device=DEVICE), torch.randn(tokens, dim, device=DEVICE)
    t = [0]

    @torch.no_grad()
    def update() -> None:
        t[0] += 1
        step_size, bc2 = lr / (1 - b1 ** t[0]), math.sqrt(1 - b2 ** t[0])
        for p, m, v in zip(params, ms, vs, strict=True):
            g = p.grad
            p.mul_(1 - lr * wd)
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.addcdiv_(m, (v.sqrt() / bc2).add_(eps), value=-step_size)

    def step() -> torch.Tensor:
        with autocast():
            loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        update()
        return loss.detach()

    return (lambda i: None), step, params


def compile_helpers() -> tuple[Callable[[int], None], Callable[[], torch.Tensor], list[torch.Tensor]]:
    """The eighth set's compile_helpers baseline, its model built by that script's own classes."""
    mod = runpy.run_path(str(HERE.parent / "heldout8" / "compile_helpers.py"), run_name="compile_helpers")
    helpers, block = mod["H"], mod["Block"]
    torch.manual_seed(0)
    dim, heads, layers, ffn, vocab, batch, seq = 512, 8, 8, 1408, 32000, 8, 512
    emb, head = nn.Embedding(vocab, dim).to(DEVICE), nn.Linear(dim, vocab, bias=False).to(DEVICE)
    blocks = nn.ModuleList(block(dim, heads, ffn) for _ in range(layers)).to(DEVICE)
    norm = nn.Parameter(torch.ones(dim, device=DEVICE))
    params = [*emb.parameters(), *head.parameters(), *blocks.parameters(), norm]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True, capturable=True)
    inv = 1.0 / 10000 ** (torch.arange(0, dim // heads, 2, device=DEVICE).float() / (dim // heads))
    ang = torch.arange(seq, device=DEVICE).float()[:, None] * inv
    cos, sin = ang.cos(), ang.sin()
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    data = torch.randint(0, vocab, (4, batch, seq + 1), device=DEVICE, generator=gen)
    helpers.update({k: torch.compile(f) for k, f in helpers.items()})
    tokens = data[0].clone()

    def load(i: int) -> None:
        tokens.copy_(data[i % 4], non_blocking=True)

    def step() -> torch.Tensor:
        with autocast():
            x = emb(tokens[:, :-1])
            for blk in blocks:
                x = blk(x, cos, sin)
            logits = head(helpers["rms_norm"](x, norm))
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        return loss.detach()

    return load, step, params


WORKLOADS = {"compile_helpers": compile_helpers, "l2_penalty": l2_penalty, "sgd_groups": sgd_groups, "manual_adam": manual_adam}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    if not CUDA:
        sys.exit("whole_step_graph.py needs CUDA (a CUDA graph)")
    load, step, params = WORKLOADS[args.workload]()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            load(i)
            for q in params:
                q.grad = None
            step()
    torch.cuda.current_stream().wait_stream(side)
    for q in params:  # the captured backward writes the gradients (none to accumulate into)
        q.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        load(i)
        graph.replay()
        total += out
        timer.end()
    timer.report(f"whole_step_graph {args.workload} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
