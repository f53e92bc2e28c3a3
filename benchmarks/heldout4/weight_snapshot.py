"""A transformer classifier whose loop keeps a "last good weights" copy for rolling back after a loss
spike: every step ends with `{k: v.detach().cpu() for k, v in model.state_dict().items()}`, a
blocking copy of every weight from the GPU into fresh pageable host memory.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout4/weight_snapshot.py
Variants: --variant gpu_copy (the snapshot kept in preallocated GPU buffers, one
`torch._foreach_copy_`), --variant pinned_async (preallocated pinned host buffers filled with
non-blocking `copy_` calls on a side stream that overlap the next step's forward and backward; the next
optimizer step waits for them). Same weights, data and snapshot contents. On the GPU: 12-layer
pre-norm `nn.TransformerEncoder` (width 1024, 16 heads, 151M fp32 weights, 604 MB), 8 x 1024 tokens,
bf16 autocast, AdamW(fused). Each step ends with tracekit.step().
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, encoder, options, train


class WaitingOptimizer:
    """An optimizer whose step first makes the current stream wait for the snapshot stream."""

    def __init__(self, opt: torch.optim.Optimizer, side: "torch.cuda.Stream | None") -> None:
        self.opt, self.side = opt, side

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)
        self.opt.step()


def main() -> None:
    args = options(__doc__, ("gpu_copy", "pinned_async")).parse_args()
    dim, heads, layers, batch, seq, classes = (1024, 16, 12, 8, 1024, 1000) if CUDA else (32, 4, 2, 2, 16, 10)
    torch.manual_seed(0)
    body, head, params = encoder(dim, heads, layers, classes)
    x = torch.randn(batch, seq, dim, device=DEVICE)
    y = torch.randint(0, classes, (batch,), device=DEVICE)
    modules = torch.nn.ModuleDict({"body": body, "head": head})
    names = list(modules.state_dict().keys())
    live = list(modules.state_dict().values())
    side = torch.cuda.Stream() if CUDA and args.variant == "pinned_async" else None
    opt = WaitingOptimizer(adamw(params), side)
    pinned = CUDA and args.variant == "pinned_async"
    buffers: list[torch.Tensor] = []
    if args.variant == "gpu_copy":
        buffers = [torch.empty_like(v) for v in live]
    elif args.variant == "pinned_async":
        buffers = [torch.empty(v.shape, dtype=v.dtype, pin_memory=pinned) for v in live]
    snapshot: dict[str, torch.Tensor] = {}  # the rollback copy (never read here)
    calls = 0

    def keep(loss: torch.Tensor) -> None:
        nonlocal snapshot, calls
        if args.variant is None:
            snapshot = {k: v.detach().cpu() for k, v in modules.state_dict().items()}
        elif side is not None:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for b, v in zip(buffers, live, strict=True):
                    b.copy_(v, non_blocking=True)
            snapshot = dict(zip(names, buffers, strict=True))
        else:
            with torch.no_grad():
                torch._foreach_copy_(buffers, live)
            snapshot = dict(zip(names, buffers, strict=True))
        calls += 1

    def loss_of(i: int) -> torch.Tensor:
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            return F.cross_entropy(head(body(x).mean(1)).float(), y)

    train("weight_snapshot", args.variant, args.steps, opt, loss_of, after=keep)
    assert calls == args.steps and len(snapshot) == len(names)


if __name__ == "__main__":
    main()
