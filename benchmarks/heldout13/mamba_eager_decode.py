"""Token-by-token generation with a small Mamba model stepped eagerly (about 900 kernels per token).

Workload: greedy generation with a Mamba-130M-shaped selective state-space LM (24 residual blocks of
width 768: RMSNorm, in_proj to 2 x 1536, depthwise causal conv of width 4, x_proj to dt (rank 48), B
and C (state 16), dt_proj, softplus, the selective state update, D skip, SiLU gate, out_proj; tied
50,280-token embedding), bf16 weights, float32 SSM state, inference mode, batch 1. The 32-token prompt
is run through the recurrent step once at start-up; each step then generates 4 tokens with the
reference `step()` of mamba_simple (the path taken without the fused Triton/CUDA kernels: `torch.roll`
of the conv state, einsums for the state update), argmax on the GPU, the token fed back as a tensor
(no host read until the end).

Variant `cuda_graph`: one token's step (embedding, 24 blocks, norm, head, argmax, the token written
back into the input buffer) captured once in a CUDA graph on static state buffers, replayed per
token; the same kernels on the same values. Without CUDA it runs eagerly.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, LAYERS, VOCAB, PROMPT, TOKENS = 768, 24, 50280, 32, 4
else:
    DIM, LAYERS, VOCAB, PROMPT, TOKENS = 32, 2, 256, 8, 4
D_INNER, D_STATE, D_CONV = 2 * DIM, 16, 4
DT_RANK = math.ceil(DIM / 16)
DTYPE = torch.bfloat16 if CUDA else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class Mixer(nn.Module):
    """Mamba's selective SSM mixer; `step` is mamba_simple's single-token reference path."""

    def __init__(self) -> None:
        super().__init__()
        self.in_proj = nn.Linear(DIM, 2 * D_INNER, bias=False)
        self.conv1d = nn.Conv1d(D_INNER, D_INNER, D_CONV, groups=D_INNER, padding=D_CONV - 1)
        self.x_proj = nn.Linear(D_INNER, DT_RANK + 2 * D_STATE, bias=False)
        self.dt_proj = nn.Linear(DT_RANK, D_INNER)
        self.out_proj = nn.Linear(D_INNER, DIM, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, D_STATE + 1, dtype=torch.float32)).repeat(D_INNER, 1))
        self.D = nn.Parameter(torch.ones(D_INNER))
        with torch.no_grad():  # dt initialised in [1e-3, 1e-1] through the inverse softplus, as in Mamba
            dt = torch.exp(torch.rand(D_INNER) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def step(self, hidden: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        xz = self.in_proj(hidden)
        x, z = xz.chunk(2, dim=-1)
        conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
        conv_state[:, :, -1] = x
        x = torch.sum(conv_state * self.conv1d.weight[:, 0], dim=-1) + self.conv1d.bias
        x = F.silu(x).to(dtype)
        x_db = self.x_proj(x)
        dt, b, c = torch.split(x_db, [DT_RANK, D_STATE, D_STATE], dim=-1)
        dt = F.linear(dt, self.dt_proj.weight)
        a = -torch.exp(self.A_log.float())
        dt = F.softplus(dt + self.dt_proj.bias.to(dtype))
        da = torch.exp(torch.einsum("bd,dn->bdn", dt, a))
        db = torch.einsum("bd,bn->bdn", dt, b)
        ssm_state.copy_(ssm_state * da + x.unsqueeze(-1) * db)
        y = torch.einsum("bdn,bn->bd", ssm_state.to(dtype), c)
        y = y + self.D.to(dtype) * x
        y = y * F.silu(z)
        return self.out_proj(y)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.mixer = RMSNorm(DIM), Mixer()

    def step(self, h: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor) -> torch.Tensor:
        return h + self.mixer.step(self.norm(h), conv_state, ssm_state)


class MambaLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm_f = RMSNorm(DIM)
        nn.init.normal_(self.embedding.weight, std=0.02)

    def step(self, token: torch.Tensor, conv_states: list[torch.Tensor], ssm_states: list[torch.Tensor]) -> torch.Tensor:
        """One token (batch,) -> logits (batch, vocab), updating the states in place."""
        h = self.embedding(token)
        for layer, cs, ss in zip(self.layers, conv_states, ssm_states, strict=True):
            h = layer.step(h, cs, ss)
        return F.linear(self.norm_f(h), self.embedding.weight)


def main() -> None:
    args = options(__doc__, ("cuda_graph",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = MambaLM().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), device=DEVICE, generator=gen)
    conv_states = [torch.zeros(1, D_INNER, D_CONV, device=DEVICE, dtype=DTYPE) for _ in range(LAYERS)]
    ssm_states = [torch.zeros(1, D_INNER, D_STATE, device=DEVICE, dtype=torch.float32) for _ in range(LAYERS)]
    token = torch.zeros(1, dtype=torch.long, device=DEVICE)

    def decode_one() -> None:
        logits = model.step(token, conv_states, ssm_states)
        token.copy_(logits.argmax(-1))

    with torch.inference_mode():
        for i in range(PROMPT):  # prefill through the recurrence
            logits = model.step(prompt[:, i], conv_states, ssm_states)
        token.copy_(logits.argmax(-1))
        step_fn = decode_one
        if args.variant == "cuda_graph" and CUDA:
            # warm up on a side stream on copies of the states, then capture one token on the real ones
            saved = [s.clone() for s in (*conv_states, *ssm_states, token)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    decode_one()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                decode_one()
            for dst, src in zip((*conv_states, *ssm_states, token), saved, strict=True):
                dst.copy_(src)
            step_fn = graph.replay

        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                step_fn()
                checksum += token.sum()
            timer.end()
    timer.report(f"mamba_eager_decode variant={args.variant or 'baseline'} token checksum {checksum.item()}")


if __name__ == "__main__":
    main()
