"""Code-completion decoding from an int4 checkpoint that the server dequantizes to bf16 at load.

A code-completion model shipped as a GPTQ-style int4 checkpoint (round-to-nearest, groups of 128,
asymmetric scales and zeros) for its 32 Linear layers: 8 pre-norm decoder layers of width 4,096
(32 heads of 128, fused QKV, SwiGLU MLP of 11,008 with a fused gate/up projection, RMSNorm,
learned positions), a bf16 embedding and vocabulary head (32,000). Four editor sessions are served
together: each 256-token file prefix is prefilled once, before the timed loop, into a static KV
cache; every step decodes 8 greedy tokens for the four sessions, one token at a time.

Baseline: the loader dequantizes every int4 weight to bf16 once, `(q - 8) * scale + zero`, and
the model runs `F.linear`: each decode token (4 rows) reads 3.2 GB of bf16 weights, a memory-bound
GEMV per Linear, four times the bytes the checkpoint holds.

Variant `int4_tinygemm`: the int4 codes stay packed on the GPU (`torch._convert_weight_to_int4pack`
once at load) and every Linear runs `torch._weight_int4pack_mm` (tinygemm, as gpt-fast and
torchao's int4 weight-only do for batch-size-1 decoding), which reads the 0.8 GB of codes and their
scales and dequantizes in registers. The same int4 weights, prompts and greedy decoding; tinygemm
dequantizes and accumulates in its own arithmetic (last bf16 bits; a near-tie can change a token and
the continuation after it).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("int4_tinygemm",)
if CUDA:
    LAYERS, DIM, HEADS, MLP, VOCAB, SESSIONS, PROMPT, TOKENS = 8, 4096, 32, 11_008, 32_000, 4, 256, 8
else:  # a tiny CPU check of the script
    LAYERS, DIM, HEADS, MLP, VOCAB, SESSIONS, PROMPT, TOKENS = 1, 256, 4, 512, 128, 2, 8, 4
GROUP, CAPACITY = 128, 1024
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Int4Linear(nn.Module):
    """A Linear from the int4 checkpoint: dequantized to bf16 at load (baseline) or packed for tinygemm."""

    def __init__(self, k: int, n: int, packed: bool, gen: torch.Generator) -> None:
        super().__init__()
        self.n, self.packed = n, packed
        # the checkpoint: round-to-nearest int4 codes of trained-looking weights, per group of 128 inputs
        w = torch.randn(n, k // GROUP, GROUP, generator=gen, device=DEVICE) * k**-0.5
        lo, hi = w.amin(-1), w.amax(-1)
        scale = (hi - lo).clamp(min=1e-6) / 15
        zero = lo + 8 * scale
        codes = ((w - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32).view(n, k)
        del w
        if packed:
            sz = torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(DTYPE)  # (k / 128, n, 2)
            self.register_buffer("scales_zeros", sz)
            if CUDA:
                nibbles = (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)  # (n, k / 2)
                self.register_buffer("codes", torch._convert_weight_to_int4pack(nibbles, 8))
            else:
                self.register_buffer("codes", torch._convert_weight_to_int4pack_for_cpu(codes, 8))
        else:
            w = (codes.view(n, k // GROUP, GROUP) - 8) * scale[..., None] + zero[..., None]
            self.register_buffer("weight", w.view(n, k).to(DTYPE))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.packed:
            return F.linear(x, self.weight)
        mm = torch._weight_int4pack_mm if CUDA else torch._weight_int4pack_mm_for_cpu
        return mm(x.reshape(-1, x.shape[-1]), self.codes, GROUP, self.scales_zeros).view(*x.shape[:-1], self.n)


class Layer(nn.Module):
    def __init__(self, packed: bool, gen: torch.Generator) -> None:
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.qkv, self.o = Int4Linear(DIM, 3 * DIM, packed, gen), Int4Linear(DIM, DIM, packed, gen)
        self.gate_up, self.down = Int4Linear(DIM, 2 * MLP, packed, gen), Int4Linear(MLP, DIM, packed, gen)
        shape = (SESSIONS, HEADS, CAPACITY, DIM // HEADS)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=DTYPE), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=DTYPE), persistent=False)

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        if t > 1:  # the prefill
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = F.scaled_dot_product_attention(q, self.k_cache[:, :, :pos + 1], self.v_cache[:, :, :pos + 1])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Coder(nn.Module):
    def __init__(self, packed: bool, gen: torch.Generator) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(CAPACITY, DIM)
        self.layers = nn.ModuleList(Layer(packed, gen) for _ in range(LAYERS))
        self.norm, self.head = nn.RMSNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for layer in self.layers:
            x = layer(x, pos)
        return self.head(self.norm(x[:, -1]))


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    if PROMPT + args.steps * TOKENS > CAPACITY:
        raise SystemExit(f"the cache holds {CAPACITY} positions: at most {(CAPACITY - PROMPT) // TOKENS} steps")
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Coder(args.variant == "int4_tinygemm", torch.Generator(DEVICE).manual_seed(1)).to(DTYPE).eval()
    gen = torch.Generator(DEVICE).manual_seed(2)
    prompts = torch.randint(0, VOCAB, (SESSIONS, PROMPT), generator=gen, device=DEVICE)

    with torch.inference_mode():
        token = model(prompts, 0).argmax(-1, keepdim=True)  # prefill, before the timed loop
        pos = PROMPT
        top_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                best = model(token, pos).float().max(-1)
                top_sum += best.values.sum()
                token = best.indices.unsqueeze(1)
                pos += 1
            timer.end()
    mean_top = top_sum.item() / (args.steps * TOKENS * SESSIONS)
    timer.report(f"code_completion_dequantized_int4_decode variant={args.variant or 'baseline'} "
                 f"{args.steps * TOKENS} tokens x {SESSIONS} sessions, mean top logit {mean_top:.4f}")


if __name__ == "__main__":
    main()
