"""Commit-message generation whose static KV cache is allocated on the host and moved at every call.

A small decoder-only LM (8 pre-norm layers of width 512, 8 heads of 64, learned positions, a
16,384-token vocabulary, bf16, inference) writes commit messages for batches of 16 diff summaries:
a 96-token prompt, then 32 greedy tokens, one `generate()` call per step. Each call allocates its
layers' static key/value cache for the model's 512-token context the way much hand-written
generation code does, `torch.zeros(shape, dtype=...).to(device)`: 134 MB are zero-filled in host
memory and copied to the GPU through a pageable, synchronous copy before the first token, while the
GPU waits.

--variant device_alloc: `torch.zeros(shape, dtype=..., device=device)`: the same zeros written by
one device memset, no host buffer and no copy.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("device_alloc",)).parse_args()
if CUDA:
    DIM, HEADS, LAYERS, VOCAB, CTX, BATCH, PROMPT, NEW = 512, 8, 8, 16384, 512, 16, 96, 32
else:
    DIM, HEADS, LAYERS, VOCAB, CTX, BATCH, PROMPT, NEW = 64, 4, 2, 512, 64, 2, 12, 6
HD = DIM // HEADS
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.cache: torch.Tensor | None = None

    def new_cache(self) -> None:
        shape = (2, BATCH, HEADS, CTX, HD)
        if args.variant == "device_alloc":
            self.cache = torch.zeros(shape, dtype=DTYPE, device=DEVICE)
        else:
            self.cache = torch.zeros(shape, dtype=DTYPE).to(DEVICE)

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        assert self.cache is not None
        self.cache[0, :, :, pos:pos + t] = k
        self.cache[1, :, :, pos:pos + t] = v
        keys, values = self.cache[0, :, :, :pos + t], self.cache[1, :, :, :pos + t]
        a = F.scaled_dot_product_attention(q, keys, values, is_causal=t > 1)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class CommitLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(CTX, DIM)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight[pos:pos + ids.shape[1]]
        for layer in self.layers:
            x = layer(x, pos)
        return self.head(self.norm(x[:, -1]))

    def generate(self, prompt: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            layer.new_cache()  # type: ignore[operator]
        tok = self(prompt, 0).argmax(-1, keepdim=True)
        out = [tok]
        for j in range(NEW - 1):
            tok = self(tok, PROMPT + j).argmax(-1, keepdim=True)
            out.append(tok)
        return torch.cat(out, 1)


torch.manual_seed(0)
with torch.device(DEVICE):
    model = CommitLM().to(DTYPE).eval()
gen = torch.Generator(DEVICE).manual_seed(23)
prompts = torch.randint(0, VOCAB, (8, BATCH, PROMPT), device=DEVICE, generator=gen)

total = torch.zeros((), device=DEVICE, dtype=torch.int64)
timer = StepTimer()
with torch.inference_mode():
    for i in range(args.steps):
        timer.tick()
        total += model.generate(prompts[i % len(prompts)]).sum()
        timer.end()
timer.report(f"commit_lm_cpu_kv_cache variant={args.variant or 'baseline'} token sum {total.item()}")
