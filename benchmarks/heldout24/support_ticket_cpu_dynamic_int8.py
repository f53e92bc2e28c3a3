"""Support-ticket intent routing served with PyTorch's dynamic int8 quantization, which runs only on the CPU.

A BERT-style intent classifier (6 pre-norm blocks of width 512, 8 heads, GELU MLPs of 2,048,
30,522-token vocabulary, 20 intents) labels 16 tickets of 128 tokens per step on a GPU server.
Baseline: the model was quantized as in PyTorch's dynamic-quantization tutorial,
`torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)`: every Linear
becomes a `DynamicQuantizedLinear` (int8 weights, activations quantized per call), whose kernels
(fbgemm / x86) exist only for the CPU, so the model and the tokens stay on the host's cores (~77
GFLOP of Linear work per step, plus float32 attention, LayerNorm and GELU) while the GPU idles.
Variant `gpu_bf16`: the same float model, cast to bf16 and served on the GPU (the token ids are
copied over per request); int8 on the GPU would need another stack (torchao and `torch.compile`).
The probabilities differ by the int8 rounding (in the third digit).
"""

import warnings

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("gpu_bf16",)
TICKETS, TOKENS = (16, 128) if CUDA else (2, 16)
DIM, HEADS, LAYERS, VOCAB, INTENTS = (512, 8, 6, 30_522, 20) if CUDA else (64, 4, 2, 1000, 20)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n1(x)
        q, k, v = (f(h).view(b, t, HEADS, d // HEADS).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class IntentClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(TOKENS, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, INTENTS)

    def forward(self, ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids) + self.pos.weight
        for blk in self.blocks:
            x = blk(x, keep)
        w = keep.unsqueeze(-1).to(x.dtype)
        return self.head(self.norm(x).mul(w).sum(1) / w.sum(1))


def main() -> None:
    args = options(__doc__ or "", VARIANTS).parse_args()
    torch.manual_seed(0)
    model = IntentClassifier().eval()  # built on the CPU, as loaded from a checkpoint
    on_gpu = args.variant == "gpu_bf16"
    if on_gpu:
        model = model.to(DEVICE, torch.bfloat16 if CUDA else torch.float32)
        where = DEVICE
    else:
        with warnings.catch_warnings():  # torch.ao.quantization warns that it is deprecated
            warnings.simplefilter("ignore")
            model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
        where = "cpu"
    gen = torch.Generator().manual_seed(1)
    requests = []  # tokenizer output, on the host
    for _ in range(4):
        ids = torch.randint(VOCAB // 30, VOCAB, (TICKETS, TOKENS), generator=gen)
        lengths = torch.randint(TOKENS // 4, TOKENS + 1, (TICKETS,), generator=gen)
        keep = torch.arange(TOKENS)[None, :] < lengths[:, None]
        requests.append((ids.masked_fill(~keep, 0), keep))
    total = torch.zeros((), dtype=torch.float64, device=where)
    timer = StepTimer()
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            ids, keep = requests[i % len(requests)]
            probs = model(ids.to(where), keep.to(where)).float().softmax(-1)
            total += probs.max(-1).values.mean()
            timer.end()
    timer.report(f"support_ticket_cpu_dynamic_int8 variant={args.variant or 'baseline'} "
                 f"mean intent probability {total.item() / args.steps:.4f}")


if __name__ == "__main__":
    main()
