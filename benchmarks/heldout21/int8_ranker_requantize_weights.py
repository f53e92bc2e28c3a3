"""Int8 (W8A8) serving of a feed-forward ranking tower (12 residual blocks of 2,048 -> 8,192 -> 2,048, 512
candidates per call, 3 calls per step, `torch._int_mm`) whose Linears quantize their bf16 weights inside
`forward`, on every call: per-channel absmax, divide, round, clamp and cast over all 403 M weights, about a
dozen weight-sized passes, for int8 weights that never change."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANT = "quantize_once"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# width, hidden width, blocks, candidates per call, calls per step
DIM, HID, BLOCKS, ROWS, CALLS = (2048, 8192, 12, 512, 3) if CUDA else (64, 128, 2, 32, 2)
WDTYPE = torch.bfloat16 if CUDA else torch.float32


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: (int8 weight, float32 scale per row)."""
    wf = w.float()
    scale = wf.abs().amax(1).clamp(min=1e-8) / 127
    return (wf / scale[:, None]).round().clamp(-127, 127).to(torch.int8), scale


class Int8Linear(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter((torch.randn(d_out, d_in) / d_in ** 0.5).to(WDTYPE), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(d_out), requires_grad=False)
        self.packed: tuple[torch.Tensor, torch.Tensor] | None = None

    def pack(self) -> None:
        self.packed = quantize_weight(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w_q, w_s = self.packed if self.packed is not None else quantize_weight(self.weight)  # per call: baseline
        x2 = x.reshape(-1, x.shape[-1]).float()
        x_s = x2.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127  # dynamic per-row activation scale
        x_q = (x2 / x_s).round().clamp(-127, 127).to(torch.int8)
        y = torch._int_mm(x_q, w_q.t()).float() * x_s * w_s[None, :] + self.bias
        return y.to(x.dtype).view(*x.shape[:-1], -1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(DIM), Int8Linear(DIM, HID), Int8Linear(HID, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


with torch.device(DEVICE):
    blocks = nn.Sequential(*(Block() for _ in range(BLOCKS))).to(WDTYPE)
    score = nn.Linear(DIM, 1).to(WDTYPE)
    gen = torch.Generator(DEVICE).manual_seed(1)
    feats = torch.randn(CALLS, ROWS, DIM, generator=gen).to(WDTYPE)
if args.variant == VARIANT:
    for mod in blocks.modules():
        if isinstance(mod, Int8Linear):
            mod.pack()  # once, at load

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for _ in range(args.steps):
        timer.tick()
        for c in range(CALLS):
            total += score(blocks(feats[c])).float().sum()
        timer.end()
timer.report(f"int8_ranker_requantize_weights variant={args.variant or 'baseline'} score sum {total.item():.5f}")
