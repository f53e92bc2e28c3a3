"""Chat fine-tuning of a TinyLlama-shaped model after adding a pad token: a 32,001-token vocabulary.

A Llama-style causal LM written in the Hugging Face layout (hidden 2048, 32 query / 4 K/V heads of
64, rotary, RMSNorm, SwiGLU 5632, untied embedding and `lm_head`; 2 decoder layers) starts from
32,000 tokens; the tokenizer gains a `<pad>` token and the script calls
`model.resize_token_embeddings(len(tokenizer))` (new rows initialised to the mean embedding), so
the embedding, the head and the logits are 32,001 wide: an odd leading dimension in the head's
forward GEMM and both of its backward GEMMs. 8 packed sequences of 1,024 tokens, bf16 autocast,
fused AdamW, next-token cross-entropy. Variant `pad_vocab`:
`resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)` (32,064 rows; the loss reads
`logits[..., :32001]`, so the 63 unused rows change nothing).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

args = options(__doc__, ("pad_vocab",)).parse_args()
torch.manual_seed(0)
if CUDA:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, BASE_VOCAB, BATCH, SEQ = 2048, 32, 4, 5632, 2, 32000, 8, 1024
else:
    HIDDEN, HEADS, KV_HEADS, INTER, LAYERS, BASE_VOCAB, BATCH, SEQ = 64, 4, 2, 160, 2, 500, 2, 32
HD = HIDDEN // HEADS
LEN_TOKENIZER = BASE_VOCAB + 1  # + "<pad>"


class LlamaRMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    return torch.cat((-x[..., HD // 2:], x[..., : HD // 2]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HD, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HD, bias=False)
        self.o_proj = nn.Linear(HEADS * HD, HIDDEN, bias=False)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = h.shape
        q = self.q_proj(h).view(b, t, HEADS, HD).transpose(1, 2)
        k = self.k_proj(h).view(b, t, KV_HEADS, HD).transpose(1, 2)
        v = self.v_proj(h).view(b, t, KV_HEADS, HD).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = HEADS // KV_HEADS  # repeat_kv
        k = k[:, :, None].expand(b, KV_HEADS, rep, t, HD).reshape(b, HEADS, t, HD)
        v = v[:, :, None].expand(b, KV_HEADS, rep, t, HD).reshape(b, HEADS, t, HD)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, HIDDEN))


class LlamaMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaDecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = LlamaRMSNorm(HIDDEN), LlamaRMSNorm(HIDDEN)
        self.self_attn, self.mlp = LlamaAttention(), LlamaMLP()

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, vocab, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
        emb = torch.cat([torch.outer(torch.arange(SEQ, dtype=torch.float32), inv_freq)] * 2, dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def resize_token_embeddings(self, new_num_tokens: int, pad_to_multiple_of: int | None = None) -> None:
        """As in transformers: copy the old rows, new rows = the mean of the old ones."""
        if pad_to_multiple_of is not None:
            new_num_tokens = (new_num_tokens + pad_to_multiple_of - 1) // pad_to_multiple_of * pad_to_multiple_of
        for module in (self.embed_tokens, self.lm_head):
            old = module.weight.data
            new = torch.empty(new_num_tokens, HIDDEN, device=old.device, dtype=old.dtype)
            new[: old.shape[0]] = old
            new[old.shape[0]:] = old.mean(0)
            module.weight = nn.Parameter(new)
        self.embed_tokens.num_embeddings = self.lm_head.out_features = new_num_tokens

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, self.cos[:t], self.sin[:t])
        return self.lm_head(self.norm(h))


with torch.device(DEVICE):
    model = LlamaForCausalLM(BASE_VOCAB)
if args.variant == "pad_vocab":
    model.resize_token_embeddings(LEN_TOKENIZER, pad_to_multiple_of=64)
else:
    model.resize_token_embeddings(LEN_TOKENIZER)
opt = adamw(list(model.parameters()))
gen = torch.Generator(device=DEVICE).manual_seed(1)
tokens = torch.randint(0, BASE_VOCAB, (4, BATCH, SEQ + 1), generator=gen, device=DEVICE)


def loss_of(i: int) -> torch.Tensor:
    ids = tokens[i % 4]
    with bf16():
        logits = model(ids[:, :-1])[..., :LEN_TOKENIZER]  # a no-op slice at 32,001 rows
    return F.cross_entropy(logits.float().reshape(-1, LEN_TOKENIZER), ids[:, 1:].reshape(-1))


train("pad_token_vocab", args.variant, args.steps, opt, loss_of)
