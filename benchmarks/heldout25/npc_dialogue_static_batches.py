"""NPC dialogue generation with static batches: finished requests hold their slot until the batch's longest is done.

A game server writes non-player-character lines with a small GPT-style decoder (4 pre-norm layers of
width 512, 8 heads of 64, learned positions, 8,192-token vocabulary, bf16, SDPA, a static KV cache of
16 slots x 128 positions). One step serves a round of 48 requests: prompts of 16-48 tokens, each with
its own `max_tokens` budget (4-64, most short: barks and one-liners, a few long monologues); greedy
decoding, no stop token. Each admitted request is prefilled on its own (prompt lengths differ), and
the decode step runs all 16 slots together, each at its own position (a per-slot attention mask).

Baseline: static batching. Requests are taken 16 at a time; the batch decodes until its longest
budget is spent, so slots whose request finished early keep decoding tokens nobody reads: about 150
decode iterations per round for about 50 iterations' worth of requested tokens.

Variant `continuous_batching`: when a slot's request reaches its budget, the next waiting request is
prefilled into that slot and joins the following decode iteration (iteration-level scheduling, as in
Orca / vLLM / TGI): about 70 iterations per round. The same prefills, the same per-slot decode
computation (always 16 rows), the same tokens.
"""

from collections import deque

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

NAME = "npc_dialogue_static_batches"
VARIANTS = ("continuous_batching",)

if CUDA:
    DIM, HEADS, LAYERS, VOCAB, SLOTS, REQUESTS = 512, 8, 4, 8192, 16, 48
else:  # tiny check of the script on the CPU
    DIM, HEADS, LAYERS, VOCAB, SLOTS, REQUESTS = 32, 4, 2, 128, 4, 12
HD = DIM // HEADS
PMIN, PMAX, BMIN, BMAX = 16, 48, 4, 64
CTX = 128
ROUNDS = 4


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.n2(x))))

    def prefill(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        """x (1, P, D) from position 0; fills kc/vc (1, H, CTX, HD) at 0..P-1."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        kc[:, :, :n] = k
        vc[:, :, :n] = v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.mlp(x + self.o(a.transpose(1, 2).reshape(b, n, d)))

    def decode(self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
        """x (S, 1, D), one token per slot at its own position pos (S,)."""
        b, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        kc[rows, :, pos] = k[:, :, 0]
        vc[rows, :, pos] = v[:, :, 0]
        a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        return self.mlp(x + self.o(a.transpose(1, 2).reshape(b, n, d)))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(CTX, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def prefill(self, ids: torch.Tensor, slot: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight[:ids.shape[1]]
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer.prefill(x, kc[slot:slot + 1], vc[slot:slot + 1])
        return self.head(self.norm(x[:, -1])).argmax(-1)

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, caches: list[tuple[torch.Tensor, torch.Tensor]],
               rows: torch.Tensor) -> torch.Tensor:
        x = (self.tok(tokens) + self.pos(pos)).unsqueeze(1)
        mask = (torch.arange(CTX, device=pos.device) <= pos[:, None])[:, None, None, :]
        for layer, (kc, vc) in zip(self.layers, caches, strict=True):
            x = layer.decode(x, kc, vc, rows, pos, mask)
        return self.head(self.norm(x[:, 0])).argmax(-1)


class Server:
    """Slot state on the GPU (request id, tokens written, position, last token); budgets on the host."""

    def __init__(self, model: Decoder, dtype: torch.dtype) -> None:
        self.model = model
        self.caches = [(torch.zeros(SLOTS, HEADS, CTX, HD, dtype=dtype, device=DEVICE),
                        torch.zeros(SLOTS, HEADS, CTX, HD, dtype=dtype, device=DEVICE)) for _ in range(LAYERS)]
        self.rows = torch.arange(SLOTS, device=DEVICE)
        self.req = torch.full((SLOTS,), REQUESTS, device=DEVICE)  # REQUESTS: a scratch row for idle slots
        self.count = torch.zeros(SLOTS, dtype=torch.long, device=DEVICE)
        self.pos = torch.zeros(SLOTS, dtype=torch.long, device=DEVICE)
        self.last = torch.zeros(SLOTS, dtype=torch.long, device=DEVICE)
        self.out = torch.zeros(REQUESTS + 1, BMAX + 1, dtype=torch.long, device=DEVICE)

    def admit(self, slot: int, r: int, prompt: torch.Tensor) -> None:
        first = self.model.prefill(prompt[None], slot, self.caches)
        self.out[r, :1] = first
        self.last[slot:slot + 1] = first
        self.req[slot] = r
        self.count[slot] = 1
        self.pos[slot] = prompt.shape[0]

    def idle(self, slot: int) -> None:
        self.req[slot] = REQUESTS

    def decode(self) -> None:
        nxt = self.model.decode(self.last, self.pos, self.caches, self.rows)
        self.out[self.req, self.count] = nxt
        self.last = nxt
        self.count.add_(1).clamp_(max=BMAX)
        self.pos.add_(1).clamp_(max=CTX - 1)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if CUDA else torch.float32
    with torch.device(DEVICE):
        model = Decoder().to(dtype).eval()
    server = Server(model, dtype)

    host = torch.Generator().manual_seed(25)  # request sizes are known to the scheduler, on the host
    lengths = torch.randint(PMIN, PMAX + 1, (ROUNDS, REQUESTS), generator=host).tolist()
    budgets = (BMIN + (60 * torch.rand(ROUNDS, REQUESTS, generator=host) ** 4).long()).tolist()
    gen = torch.Generator(device=DEVICE).manual_seed(25)
    prompts = torch.randint(0, VOCAB, (ROUNDS, REQUESTS, PMAX), generator=gen, device=DEVICE)
    budget_t = torch.tensor(budgets, device=DEVICE)
    keep = torch.arange(BMAX + 1, device=DEVICE) < budget_t[..., None]  # (ROUNDS, REQUESTS, BMAX + 1)

    token_sum = torch.zeros((), dtype=torch.long, device=DEVICE)
    iterations = 0
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            rnd = i % ROUNDS
            plen, budget = lengths[rnd], budgets[rnd]

            def prompt(r: int, rnd: int = rnd, plen: list[int] = plen) -> torch.Tensor:
                return prompts[rnd, r, :plen[r]]

            if args.variant == "continuous_batching":
                queue = deque(range(REQUESTS))
                active: list[int | None] = [None] * SLOTS
                made = [0] * SLOTS
                for s in range(SLOTS):
                    active[s] = queue.popleft()
                    server.admit(s, active[s], prompt(active[s]))
                    made[s] = 1
                while any(a is not None for a in active):
                    server.decode()
                    iterations += 1
                    for s in range(SLOTS):
                        a = active[s]
                        if a is None:
                            continue
                        made[s] += 1
                        if made[s] >= budget[a]:
                            if queue:
                                active[s] = queue.popleft()
                                server.admit(s, active[s], prompt(active[s]))
                                made[s] = 1
                            else:
                                active[s] = None
                                server.idle(s)
            else:
                for first in range(0, REQUESTS, SLOTS):
                    group = range(first, first + SLOTS)
                    for s, r in enumerate(group):
                        server.admit(s, r, prompt(r))
                    for _ in range(max(budget[r] for r in group) - 1):
                        server.decode()
                        iterations += 1
            token_sum += (server.out[:REQUESTS] * keep[rnd]).sum()
            timer.end()
    timer.report(f"{NAME} variant={args.variant or 'baseline'} decode iterations {iterations} "
                 f"token sum {token_sum.item()}")


if __name__ == "__main__":
    main()
