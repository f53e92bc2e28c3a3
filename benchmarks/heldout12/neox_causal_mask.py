"""Long-context GPT-NeoX-style training with a Hugging Face-style 4D additive causal mask passed to SDPA.

A Pythia-style decoder (6 layers of width 1024, 16 heads of 64, rotary on a quarter of each head,
parallel attention + GELU MLP residual, LayerNorm, untied 50,304-token head), 2 packed sequences of
4,096 tokens, bf16 autocast, fused AdamW. As in `_prepare_4d_causal_attention_mask`, each forward
builds a (batch, 1, T, T) bf16 mask (`finfo.min` above the diagonal, padded keys also `finfo.min`;
these packed batches have no padding) and every layer calls
`F.scaled_dot_product_attention(q, k, v, attn_mask=mask)`. Variant `is_causal`: no mask,
`F.scaled_dot_product_attention(q, k, v, is_causal=True)` (the same attention). Variant
`fused_rope_loss` (added after the set's first run, to measure what the rule that came first there,
fused_llm_kernels, offers): the mask kept, the partial-RoPE chain and the loss each under
`torch.compile` (Inductor fuses each into a few kernels).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

args = options(__doc__, ("is_causal", "fused_rope_loss")).parse_args()
torch.manual_seed(0)
if CUDA:
    D, HEADS, LAYERS, VOCAB, BATCH, SEQ = 1024, 16, 6, 50304, 2, 4096
else:
    D, HEADS, LAYERS, VOCAB, BATCH, SEQ = 64, 4, 2, 256, 2, 32
HD = D // HEADS
ROT = HD // 4  # rotary_pct 0.25
MASK_DTYPE = torch.bfloat16 if CUDA else torch.float32  # the dtype the attention runs in
IS_CAUSAL = args.variant == "is_causal"
FUSED = args.variant == "fused_rope_loss"


def prepare_4d_causal_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, T) 1/0 -> (batch, 1, T, T) additive mask: causal and key padding."""
    b, t = attention_mask.shape
    min_value = torch.finfo(dtype).min
    causal = torch.full((t, t), min_value, dtype=dtype, device=attention_mask.device).triu(1)
    mask = causal[None, None].expand(b, 1, t, t).clone()
    padding = attention_mask[:, None, None, :].eq(0)
    return mask.masked_fill(padding, min_value)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)
    q = torch.cat((q[..., :ROT] * cos + rotate_half(q[..., :ROT]) * sin, q[..., ROT:]), dim=-1)
    k = torch.cat((k[..., :ROT] * cos + rotate_half(k[..., :ROT]) * sin, k[..., ROT:]), dim=-1)
    return q, k


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().view(-1, VOCAB), target)


rope = torch.compile(apply_rope) if FUSED else apply_rope
loss_fn = torch.compile(lm_loss) if FUSED else lm_loss


class GPTNeoXAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query_key_value = nn.Linear(D, 3 * D)
        self.dense = nn.Linear(D, D)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.query_key_value(x).view(b, t, HEADS, 3 * HD).transpose(1, 2)
        q, k, v = qkv.split(HD, dim=-1)
        q, k = rope(q, k, cos, sin)
        if IS_CAUSAL:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.dense(out.transpose(1, 2).reshape(b, t, D))


class GPTNeoXLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attention = GPTNeoXAttention()
        self.dense_h_to_4h, self.dense_4h_to_h = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        attn = self.attention(self.input_layernorm(x), cos, sin, mask)
        mlp = self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(self.post_attention_layernorm(x))))
        return x + attn + mlp  # use_parallel_residual


class GPTNeoXForCausalLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_in = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([GPTNeoXLayer() for _ in range(LAYERS)])
        self.final_layer_norm = nn.LayerNorm(D)
        self.embed_out = nn.Linear(D, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, ROT, 2, dtype=torch.float32) / ROT))
        freqs = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        mask = None if IS_CAUSAL else prepare_4d_causal_attention_mask(attention_mask, MASK_DTYPE)
        cos, sin = self.cos_cached[:t], self.sin_cached[:t]
        h = self.embed_in(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.embed_out(self.final_layer_norm(h))


with torch.device(DEVICE):
    model = GPTNeoXForCausalLM()
opt = adamw(list(model.parameters()))
gen = torch.Generator(device=DEVICE).manual_seed(1)
tokens = torch.randint(0, VOCAB, (4, BATCH, SEQ + 1), generator=gen, device=DEVICE)
attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long, device=DEVICE)


def loss_of(i: int) -> torch.Tensor:
    ids = tokens[i % 4]
    with bf16():
        logits = model(ids[:, :-1], attention_mask)
    return loss_fn(logits, ids[:, 1:].reshape(-1))


train("neox_causal_mask", args.variant, args.steps, opt, loss_of)
