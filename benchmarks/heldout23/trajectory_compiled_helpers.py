"""Motion forecasting with `torch.compile` applied to small helper functions instead of the model.

A scene-encoder trajectory predictor for driving logs (32 scenes x 64 agents, each agent's last 16
states of 6 features embedded to width 256, 6 pre-norm blocks with RMSNorm, SDPA over the agents
of a scene with QK-norm, SwiGLU MLPs, a head with 6 modes x 30 future (x, y) points and mode
probabilities, bf16, inference), run on 16 consecutive time frames per step. The baseline decorates
its hot helpers, `rms_norm` and `swiglu`, with `torch.compile` and leaves the model eager: each block
makes five calls into compiled code (two norms, the q and k norms, the gated activation), each
paying Dynamo's guard check and the compiled-graph wrappers on the host, between eight eager launches,
and nothing is fused across the helpers' boundaries: a launch-bound forward made slower on the host.

--variant compile_whole_model: the same helpers left plain and `torch.compile(model)` (default
mode): one compiled call per forward, residual adds and norms fused, the launches from one wrapper.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("compile_whole_model",)).parse_args()
if CUDA:
    DIM, HEADS, LAYERS, HIDDEN, SCENES, AGENTS, FRAMES = 256, 8, 6, 768, 32, 64, 16
else:
    DIM, HEADS, LAYERS, HIDDEN, SCENES, AGENTS, FRAMES = 32, 4, 2, 64, 2, 8, 3
HIST, FEAT, MODES, FUTURE = 16, 6, 6, 30
DTYPE = torch.bfloat16 if CUDA else torch.float32


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + 1e-6)).to(x.dtype) * w


def swiglu(h: torch.Tensor) -> torch.Tensor:
    g, u = h.chunk(2, dim=-1)
    return F.silu(g) * u


WHOLE = args.variant == "compile_whole_model"
norm_fn = rms_norm if WHOLE else torch.compile(rms_norm)
act_fn = swiglu if WHOLE else torch.compile(swiglu)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Parameter(torch.ones(DIM)), nn.Parameter(torch.ones(DIM))
        self.wq, self.wk = nn.Parameter(torch.ones(DIM // HEADS)), nn.Parameter(torch.ones(DIM // HEADS))
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.up, self.down = nn.Linear(DIM, 2 * HIDDEN, bias=False), nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(norm_fn(x, self.w1)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q, k = norm_fn(q, self.wq), norm_fn(k, self.wk)  # QK-norm
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(act_fn(self.up(norm_fn(x, self.w2))))


class Forecaster(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(HIST * FEAT, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.wf = nn.Parameter(torch.ones(DIM))
        self.traj = nn.Linear(DIM, MODES * FUTURE * 2)
        self.score = nn.Linear(DIM, MODES)

    def forward(self, hist: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(hist.flatten(2))
        for blk in self.blocks:
            x = blk(x)
        x = norm_fn(x, self.wf)
        return self.traj(x).unflatten(-1, (MODES, FUTURE, 2)).cumsum(-2), self.score(x).softmax(-1)


torch.manual_seed(0)
with torch.device(DEVICE):
    model = Forecaster().to(DTYPE).eval()
run = torch.compile(model) if WHOLE else model
gen = torch.Generator(DEVICE).manual_seed(23)
# a drive log: agent states over time; frame f sees the HIST states ending at f (windows cut once, contiguous)
log = torch.randn(SCENES, AGENTS, FRAMES + HIST, FEAT, device=DEVICE, generator=gen).cumsum(2).to(DTYPE)
windows = torch.stack([log[:, :, f:f + HIST] for f in range(FRAMES)])

total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for _ in range(args.steps):
        timer.tick()
        for f in range(FRAMES):
            traj, prob = run(windows[f])
            total += (traj.float() * prob.float()[..., None, None]).sum() / traj.numel()
        timer.end()
timer.report(f"trajectory_compiled_helpers variant={args.variant or 'baseline'} "
             f"expected-endpoint checksum {total.item() / args.steps:.4f}")
