"""A compiled fp16 T5 text encoder whose blocks keep the old fp16 `if torch.isinf(h).any(): clamp`.

The text-encoder stage of a diffusion pipeline: a T5-small-shaped encoder (6 blocks of width 512,
8 heads of 64, ReLU feed-forward 2048, relative position buckets, RMS-style T5LayerNorm, no
biases, 32,128-token embedding) written in the Hugging Face T5 layout, in float16, inference mode,
`torch.compile(model)`; each step encodes 16 batches of 16 prompts x 128 tokens. As in older T5
code, every block checks its hidden states after the attention and after the feed-forward
sub-layer with `if h.dtype == torch.float16 and torch.isinf(h).any(): h = h.clamp(...)`: a
data-dependent branch, so dynamo breaks the graph there (12 times per call) and each break reads
the flag on the host. Variant `where_clamp`: the branch-free form (`clamp_value = torch.where(isinf(h).any(),
max - 1000, max)`, `h.clamp(-clamp_value, clamp_value)`: the same values) compiled with
`fullgraph=True`.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("where_clamp",)).parse_args()
torch.manual_seed(0)
if CUDA:
    D, HEADS, DKV, FF, LAYERS, VOCAB = 512, 8, 64, 2048, 6, 32128
    BATCH, SEQ, CALLS = 16, 128, 16
else:
    D, HEADS, DKV, FF, LAYERS, VOCAB = 64, 4, 16, 128, 2, 512
    BATCH, SEQ, CALLS = 2, 16, 2
BUCKETS, MAX_DIST = 32, 128
WHERE = args.variant == "where_clamp"


class T5LayerNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(self.weight.dtype)


def relative_position_bucket(rel: torch.Tensor) -> torch.Tensor:
    """Bidirectional T5 buckets: half for each sign, exact up to 8, logarithmic up to 128."""
    n = BUCKETS // 2
    buckets = (rel > 0).long() * n
    rel = rel.abs()
    exact = n // 2
    large = exact + (torch.log(rel.float() / exact) / math.log(MAX_DIST / exact) * (n - exact)).long()
    large = torch.clamp(large, max=n - 1)
    return buckets + torch.where(rel < exact, rel, large)


class T5Attention(nn.Module):
    def __init__(self, has_relative_attention_bias: bool) -> None:
        super().__init__()
        inner = HEADS * DKV
        self.q, self.k = nn.Linear(D, inner, bias=False), nn.Linear(D, inner, bias=False)
        self.v, self.o = nn.Linear(D, inner, bias=False), nn.Linear(inner, D, bias=False)
        self.has_relative_attention_bias = has_relative_attention_bias
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(BUCKETS, HEADS)

    def compute_bias(self, qlen: int, klen: int, device: torch.device) -> torch.Tensor:
        ctx = torch.arange(qlen, dtype=torch.long, device=device)[:, None]
        mem = torch.arange(klen, dtype=torch.long, device=device)[None, :]
        values = self.relative_attention_bias(relative_position_bucket(mem - ctx))  # (q, k, H)
        return values.permute(2, 0, 1).unsqueeze(0)

    def forward(self, h: torch.Tensor, position_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = h.shape

        def shape(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, t, HEADS, DKV).transpose(1, 2)

        q, k, v = shape(self.q(h)), shape(self.k(h)), shape(self.v(h))
        scores = torch.matmul(q, k.transpose(3, 2))  # T5: no 1/sqrt(d) scaling
        if position_bias is None:
            position_bias = self.compute_bias(t, t, h.device).to(scores.dtype)
        scores = scores + position_bias
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, HEADS * DKV)
        return self.o(out), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, has_relative_attention_bias: bool) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(has_relative_attention_bias)
        self.layer_norm = T5LayerNorm(D)

    def forward(self, h: torch.Tensor, position_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        out, position_bias = self.SelfAttention(self.layer_norm(h), position_bias)
        return h + out, position_bias


class T5LayerFF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wi, self.wo = nn.Linear(D, FF, bias=False), nn.Linear(FF, D, bias=False)
        self.layer_norm = T5LayerNorm(D)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.wo(F.relu(self.wi(self.layer_norm(h))))


def clamp_inf(h: torch.Tensor) -> torch.Tensor:
    """Keep fp16 activations finite (the T5 fp16 work-around)."""
    if WHERE:
        if h.dtype == torch.float16:
            clamp_value = torch.where(torch.isinf(h).any(), torch.finfo(h.dtype).max - 1000, torch.finfo(h.dtype).max)
            h = torch.clamp(h, min=-clamp_value, max=clamp_value)
        return h
    # clamp inf values to enable fp16 inference
    if h.dtype == torch.float16 and torch.isinf(h).any():
        clamp_value = torch.finfo(h.dtype).max - 1000
        h = torch.clamp(h, min=-clamp_value, max=clamp_value)
    return h


class T5Block(nn.Module):
    def __init__(self, has_relative_attention_bias: bool) -> None:
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(has_relative_attention_bias), T5LayerFF()])

    def forward(self, h: torch.Tensor, position_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        h, position_bias = self.layer[0](h, position_bias)
        h = clamp_inf(h)
        h = self.layer[1](h)
        h = clamp_inf(h)
        return h, position_bias


class T5EncoderModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.block = nn.ModuleList([T5Block(i == 0) for i in range(LAYERS)])
        self.final_layer_norm = T5LayerNorm(D)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        position_bias = None
        for blk in self.block:
            h, position_bias = blk(h, position_bias)
        return self.final_layer_norm(h)


def init_t5(model: T5EncoderModel) -> None:
    """The T5 initialisation (factor 1.0)."""
    for m in model.modules():
        if isinstance(m, T5Attention):
            nn.init.normal_(m.q.weight, std=(D * DKV) ** -0.5)
            nn.init.normal_(m.k.weight, std=D ** -0.5)
            nn.init.normal_(m.v.weight, std=D ** -0.5)
            nn.init.normal_(m.o.weight, std=(HEADS * DKV) ** -0.5)
            if m.has_relative_attention_bias:
                nn.init.normal_(m.relative_attention_bias.weight, std=D ** -0.5)
        elif isinstance(m, T5LayerFF):
            nn.init.normal_(m.wi.weight, std=D ** -0.5)
            nn.init.normal_(m.wo.weight, std=FF ** -0.5)
    nn.init.normal_(model.embed_tokens.weight, std=1.0)


with torch.device(DEVICE):
    model = T5EncoderModel()
init_t5(model)
model = model.half().eval()
encoder = torch.compile(model, fullgraph=True) if WHERE else torch.compile(model)

gen = torch.Generator(device=DEVICE).manual_seed(1)
prompts = torch.randint(3, VOCAB, (CALLS, BATCH, SEQ), generator=gen, device=DEVICE)
prompts[:, :, -1] = 1  # </s>

check = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
with torch.inference_mode():
    for _ in range(args.steps):
        timer.tick()
        for c in range(CALLS):
            emb = encoder(prompts[c])
            check += emb.float().abs().mean()
        timer.end()
timer.report(f"t5_inf_clamp variant={args.variant or 'baseline'} embedding checksum "
             f"{check.item() / (args.steps * CALLS):.5f}")
