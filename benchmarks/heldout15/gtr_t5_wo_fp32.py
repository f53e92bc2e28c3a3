"""bf16 T5 sentence-embedding encoder whose FFN output projections were kept in float32 at load.

Workload: indexing passages for dense retrieval with a GTR-T5-base-shaped embedder (the T5 v1.0
encoder: 32,128-token embeddings, 12 layers of width 768, 12 heads of 64 without score scaling,
bucketed relative position bias (32 buckets, max distance 128) from the first layer, RMS-style
`T5LayerNorm`, ReLU FFN 3,072, no biases; masked mean pooling, a 768 -> 768 projection, L2
normalisation; 110M weights), inference mode, 64 passages of 128..256 tokens padded to 256 per step.
The model is loaded the way `T5EncoderModel.from_pretrained(..., torch_dtype=torch.bfloat16)` loads
it: Hugging Face's T5 declares `_keep_in_fp32_modules = ["wo"]` (against float16 overflow), so every
layer's FFN output projection stays float32 and `T5DenseActDense` casts its 3,072-wide activation
to float32 before it (`hidden_states.to(self.wo.weight.dtype)`): one third of the FFN FLOPs run as
float32 GEMMs at the default "highest" matmul precision (no tensor cores), and the residual stream
turns float32 after the first FFN.

Variant `all_bf16`: the model cast to bf16 after loading (`model.to(torch.bfloat16)`, the wo
projections included; bf16 has float32's range, so the float16 overflow the rule guards against
does not arise): bf16 GEMMs everywhere; the embeddings differ by bf16 rounding.

Variant `compiled` (extra, timed but not recorded): the baseline under `torch.compile` (default mode).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, SEQ, OUT_DIM = 768, 12, 12, 3072, 32128, 64, 256, 768
else:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, SEQ, OUT_DIM = 32, 4, 2, 64, 500, 4, 16, 32
D_KV = DIM // HEADS
BUCKETS, MAX_DISTANCE = 32, 128
DTYPE = torch.bfloat16 if CUDA else torch.float32


class T5LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            x = x.to(self.weight.dtype)
        return self.weight * x


def relative_position_bucket(relative_position: torch.Tensor) -> torch.Tensor:
    """T5's bidirectional buckets: exact for small distances, logarithmic up to MAX_DISTANCE."""
    num_buckets = BUCKETS // 2
    buckets = (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (torch.log(relative_position.float() / max_exact) / math.log(MAX_DISTANCE / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, large)


class Attention(nn.Module):
    def __init__(self, has_bias: bool) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.relative_attention_bias = nn.Embedding(BUCKETS, HEADS) if has_bias else None

    def position_bias(self, seq: int, device: torch.device) -> torch.Tensor:
        assert self.relative_attention_bias is not None
        pos = torch.arange(seq, dtype=torch.long, device=device)
        buckets = relative_position_bucket(pos[None, :] - pos[:, None])
        return self.relative_attention_bias(buckets).permute(2, 0, 1)[None]  # (1, H, T, T)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, HEADS, D_KV).transpose(1, 2) for proj in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(3, 2)) + bias  # T5: no 1 / sqrt(d) scaling
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o(torch.matmul(weights, v).transpose(1, 2).reshape(b, t, DIM))


class DenseReluDense(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wi, self.wo = nn.Linear(DIM, FF, bias=False), nn.Linear(FF, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.wi(x))
        if h.dtype != self.wo.weight.dtype:  # T5DenseActDense: match wo's dtype (float32 when kept)
            h = h.to(self.wo.weight.dtype)
        return self.wo(h)


class Layer(nn.Module):
    def __init__(self, has_bias: bool) -> None:
        super().__init__()
        self.attn_norm, self.ff_norm = T5LayerNorm(DIM), T5LayerNorm(DIM)
        self.attn, self.ff = Attention(has_bias), DenseReluDense()

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), bias)
        return x + self.ff(self.ff_norm(x))


class GTREncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer(i == 0) for i in range(LAYERS))
        self.final_norm = T5LayerNorm(DIM)
        self.dense = nn.Linear(DIM, OUT_DIM, bias=False)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        dtype = self.layers[0].attn.q.weight.dtype
        pad = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        bias = self.layers[0].attn.position_bias(ids.shape[1], ids.device).to(dtype) + pad
        for layer in self.layers:
            x = layer(x, bias)
        h = self.final_norm(x)
        m = mask[..., None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1)
        return F.normalize(self.dense(pooled.to(self.dense.weight.dtype)).float(), dim=-1)


def make_batches(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n, BATCH), device=DEVICE, generator=gen)
    ids = torch.randint(3, VOCAB, (n, BATCH, SEQ), device=DEVICE, generator=gen)
    mask = (torch.arange(SEQ, device=DEVICE) < lengths[..., None]).long()
    ids = ids * mask  # pad id 0
    ids.scatter_(2, (lengths - 1)[..., None], 1)  # </s> closes every passage
    return ids, mask


def main() -> None:
    args = options(__doc__, ("all_bf16", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = GTREncoder()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    model = model.to(DTYPE).eval()
    if args.variant != "all_bf16":
        for layer in model.layers:  # `_keep_in_fp32_modules = ["wo"]`
            layer.ff.wo.float()
    net = torch.compile(model) if args.variant == "compiled" else model
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids, masks = make_batches(gen, 4)

    similarity = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            emb = net(ids[step % 4], masks[step % 4])
            similarity += (emb[1:] * emb[:-1]).sum()
            timer.end()
    timer.report(f"gtr_t5_wo_fp32 variant={args.variant or 'baseline'} mean neighbour similarity "
                 f"{similarity.item() / (args.steps * (BATCH - 1)):.6f}")


if __name__ == "__main__":
    main()
