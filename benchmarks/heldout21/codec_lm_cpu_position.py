"""Audio-codec token LM (text-to-speech decoder, 6 layers of width 512, static KV cache) decoding one token per
call through `torch.compile(mode="reduce-overhead")`, with the position passed as a CPU tensor: the compiled graph
holds a CPU input and a host-to-device copy, so inductor skips CUDA graphs ("skipping cudagraphs due to cpu
device") and every token launches its kernels one by one, after a synchronising pageable copy."""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANT = "device_position"
args = options(__doc__, (VARIANT,)).parse_args()
torch.manual_seed(0)
# layers, width, heads, codebook size, streams, prompt tokens, generated tokens per step
LAYERS, DIM, HEADS, VOCAB, BATCH, PROMPT, NEW = (6, 512, 8, 2048, 8, 32, 64) if CUDA else (2, 64, 4, 128, 2, 4, 6)
TMAX = PROMPT + NEW
HD = DIM // HEADS


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)


class CodecLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(TMAX, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)
        self.register_buffer("k_cache", torch.zeros(LAYERS, BATCH, HEADS, TMAX, HD))
        self.register_buffer("v_cache", torch.zeros(LAYERS, BATCH, HEADS, TMAX, HD))
        self.register_buffer("slots", torch.arange(TMAX))

    def forward(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        pos = pos.to(self.k_cache.device)  # a copy when the caller hands a CPU tensor, else a no-op
        x = self.tok(tok) + self.pos(pos)  # (B, 1, D)
        visible = (self.slots <= pos).view(1, 1, 1, TMAX)
        for i, blk in enumerate(self.blocks):
            q, k, v = blk.qkv(blk.n1(x)).view(BATCH, 1, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
            self.k_cache[i].index_copy_(2, pos, k)
            self.v_cache[i].index_copy_(2, pos, v)
            a = F.scaled_dot_product_attention(q, self.k_cache[i], self.v_cache[i], attn_mask=visible)
            x = x + blk.o(a.transpose(1, 2).reshape(BATCH, 1, DIM))
            x = x + blk.down(F.gelu(blk.up(blk.n2(x))))
        return self.head(self.norm(x)).argmax(-1)  # (B, 1) greedy codes


with torch.device(DEVICE):
    model = CodecLM().eval()
    if CUDA:
        model.to(torch.bfloat16)
    gen = torch.Generator(DEVICE).manual_seed(1)
    prompts = torch.randint(0, VOCAB, (PROMPT, BATCH, 1), generator=gen)  # prompts[t]: (B, 1), contiguous
torch._dynamo.mark_static_address(model.k_cache)
torch._dynamo.mark_static_address(model.v_cache)
step_fn = torch.compile(model, mode="reduce-overhead")
positions = torch.arange(TMAX) if args.variant is None else torch.arange(TMAX, device=DEVICE)

total = torch.zeros((), device=DEVICE, dtype=torch.int64)
timer = StepTimer()
with torch.no_grad():
    for _ in range(args.steps):
        timer.tick()
        tok = prompts[0]
        for t in range(TMAX - 1):
            # baseline: positions live on the CPU (a Python-side counter turned into a tensor)
            nxt = step_fn(tok, positions[t:t + 1]).clone()
            tok = prompts[t + 1] if t + 1 < PROMPT else nxt
            if t + 1 >= PROMPT:
                total += nxt.sum()
        timer.end()
timer.report(f"codec_lm_cpu_position variant={args.variant or 'baseline'} code sum {total.item()}")
