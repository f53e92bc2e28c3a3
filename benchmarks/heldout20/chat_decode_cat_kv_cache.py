"""Chat-assistant decoding (32 conversations with 2,048 tokens of history, 8-layer LM) with a KV cache grown by `torch.cat`.

Baseline: each generated token appends its key and value to every layer's cache with
`torch.cat([cache, new], dim=2)`, as hand-written decoders (and dynamic caches) do: every token of
every layer copies the whole (32, 16, ~2,060, 64) bf16 key and value caches into new tensors before
attention reads them, three times the bytes attention itself needs. Variant `static_cache`: one
buffer per layer preallocated for prompt + new tokens; each token writes its slot in place and
attention reads the filled prefix (`buf[:, :, :t]`, a view). Same attention inputs, same tokens.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

LAYERS, DIM, HEADS, VOCAB, BATCH, PROMPT, NEW = (8, 1024, 16, 32000, 32, 2048, 12) if CUDA else (2, 32, 2, 100, 2, 16, 4)
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.up, self.down = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(4 * DIM, DIM, bias=False)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        return q, k, v  # (B, H, T, hd) each

    def finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        b, h, t, hd = a.shape
        x = x + self.o(a.transpose(1, 2).reshape(b, t, h * hd))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class ChatLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(PROMPT + NEW, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x[:, -1]))


@torch.no_grad()
def main() -> None:
    args = options(__doc__, ("static_cache",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        lm = ChatLM().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(20)
    history = torch.randint(0, VOCAB, (BATCH, PROMPT), generator=gen, device=DEVICE)
    # prefill once: the conversation history's keys and values, (B, H, PROMPT, hd) per layer
    x = lm.emb(history) + lm.pos.weight[:PROMPT]
    keys, values = [], []
    for layer in lm.layers:
        q, k, v = layer.project(x)
        keys.append(k.contiguous())
        values.append(v.contiguous())
        x = layer.finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    first = lm.logits(x).argmax(-1)
    static = args.variant == "static_cache"
    kbuf, vbuf = [], []
    if static:
        for k, v in zip(keys, values, strict=True):
            kb = torch.empty(BATCH, HEADS, PROMPT + NEW, DIM // HEADS, dtype=DTYPE, device=DEVICE)
            vb = torch.empty_like(kb)
            kb[:, :, :PROMPT] = k
            vb[:, :, :PROMPT] = v
            kbuf.append(kb)
            vbuf.append(vb)

    def reply() -> torch.Tensor:
        """Greedy decoding of NEW tokens after the history (each step answers the same history)."""
        tok, out = first, []
        kc, vc = list(keys), list(values)
        for j in range(NEW):
            t = PROMPT + j
            x = lm.emb(tok[:, None]) + lm.pos.weight[t]
            for li, layer in enumerate(lm.layers):
                q, k, v = layer.project(x)
                if static:
                    kbuf[li][:, :, t:t + 1] = k
                    vbuf[li][:, :, t:t + 1] = v
                    a = F.scaled_dot_product_attention(q, kbuf[li][:, :, :t + 1], vbuf[li][:, :, :t + 1])
                else:
                    kc[li] = torch.cat([kc[li], k], dim=2)
                    vc[li] = torch.cat([vc[li], v], dim=2)
                    a = F.scaled_dot_product_attention(q, kc[li], vc[li])
                x = layer.finish(x, a)
            tok = lm.logits(x).argmax(-1)
            out.append(tok)
        return torch.stack(out, 1)

    total = torch.zeros((), dtype=torch.int64, device=DEVICE)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        total += reply().sum()
        timer.end()
    timer.report(f"chat_decode_cat_kv_cache variant={args.variant or 'baseline'} token checksum {total.item()}")


if __name__ == "__main__":
    main()
