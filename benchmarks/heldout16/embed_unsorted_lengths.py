"""Corpus embedding in arrival order: every batch mixes short and long passages and is padded to its longest.

Workload: indexing a document corpus for retrieval with a nomic-embed-text-v1-shaped encoder (30,528
tokens, 12 post-norm layers of width 768, 12 heads of 64, rotary positions, SwiGLU 3,072, no
biases; masked mean pooling, L2 norm; 137M weights, bf16, inference mode). The corpus is
pre-tokenised on the GPU; passage lengths are long-tailed (log-normal, median 40 tokens, clipped to
8..256; 57 tokens on average). Each step embeds the next 256 passages in 8 batches of 32 taken in
arrival order, each padded to its own longest passage with a key-padding mask (dynamic padding, as
`DataCollatorWithPadding` does): a batch of 32 random passages nearly always holds one of ~200-256
tokens, so the step runs ~57k token positions for ~15k real tokens.

Variant `length_sorted`: the same 256 passages sorted by length (longest first) before they are cut
into batches of 32, and the embeddings put back in arrival order afterwards, as sentence-transformers'
`SentenceTransformer.encode` does (`length_sorted_idx = np.argsort([-len(s) for s in sentences])`)
and as Hugging Face's `group_by_length` does for training: ~19k token positions a step (and ~4.7x
less attention work). The same embeddings up to the rounding of other GEMM shapes (padding is masked
out of attention and pooling).

No extra variant (the batches' shapes change every step). In both variants the batches' index tensors
are made and uploaded once at start-up, so the loop itself reads nothing back and copies nothing up.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, MAX_LEN, DOCS, BATCH, MEDIAN = 768, 12, 12, 3072, 30528, 256, 256, 32, 40.0
else:
    DIM, HEADS, LAYERS, FF, VOCAB, MAX_LEN, DOCS, BATCH, MEDIAN = 64, 4, 2, 128, 500, 64, 16, 4, 12.0
HEAD_DIM = DIM // HEADS
POOL_STEPS = 4  # the corpus slice cycles every 4 steps
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wqkv, self.out = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.norm1, self.norm2 = nn.LayerNorm(DIM, eps=1e-12), nn.LayerNorm(DIM, eps=1e-12)
        self.fc11, self.fc12, self.fc2 = (nn.Linear(DIM, FF, bias=False), nn.Linear(DIM, FF, bias=False),
                                          nn.Linear(FF, DIM, bias=False))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = (torch.cat([-y[..., HEAD_DIM // 2:], y[..., :HEAD_DIM // 2]], -1) * sin + y * cos for y in (q, k))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.norm1(x + self.out(a.transpose(1, 2).reshape(b, t, DIM)))  # post-norm, as BERT
        return self.norm2(x + self.fc2(F.silu(self.fc11(x)) * self.fc12(x)))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word, self.token_type = nn.Embedding(VOCAB, DIM), nn.Embedding(2, DIM)
        self.emb_ln = nn.LayerNorm(DIM, eps=1e-12)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def forward(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """ids (B, T), valid (B, T) bool -> L2-normalised mean-pooled embeddings (B, DIM)."""
        t = ids.shape[1]
        inv = 1.0 / 1000.0 ** (torch.arange(0, HEAD_DIM, 2, device=ids.device, dtype=torch.float32) / HEAD_DIM)
        ang = torch.arange(t, device=ids.device, dtype=torch.float32)[:, None] * inv[None]
        cos, sin = (torch.cat([f(ang)] * 2, -1).to(DTYPE) for f in (torch.cos, torch.sin))
        x = self.emb_ln(self.word(ids) + self.token_type.weight[0])
        mask = valid[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask, cos, sin)
        w = valid[..., None].to(x.dtype)
        return F.normalize(((x * w).sum(1) / w.sum(1)).float(), dim=-1)


def main() -> None:
    args = options(__doc__, ("length_sorted",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Encoder()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    model = model.to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    n_docs = POOL_STEPS * DOCS
    corpus = torch.randint(1000 if CUDA else 10, VOCAB, (n_docs, MAX_LEN), device=DEVICE, generator=gen)
    lengths = (torch.randn(n_docs, device=DEVICE, generator=gen) * 0.9 + math.log(MEDIAN)).exp().round().clamp(8 if CUDA else 4, MAX_LEN).long()
    host_lengths = lengths.tolist()  # the tokenizer's output lengths, known on the host

    # each step: 256 documents in batches of 32, as (document indices on the device, padded length)
    plans: list[list[tuple[torch.Tensor, int]]] = []
    for s in range(POOL_STEPS):
        docs = list(range(s * DOCS, (s + 1) * DOCS))
        if args.variant == "length_sorted":
            docs.sort(key=lambda i: -host_lengths[i])
        plans.append([(torch.tensor(docs[b:b + BATCH], device=DEVICE), max(host_lengths[i] for i in docs[b:b + BATCH]))
                      for b in range(0, DOCS, BATCH)])
    positions = sum(n * idx.numel() for plan in plans for idx, n in plan) // POOL_STEPS
    probe = torch.randn(DIM, device=DEVICE, generator=gen)

    checksum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    similarity = torch.zeros((), device=DEVICE, dtype=torch.float64)
    out = torch.empty(DOCS, DIM, device=DEVICE)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            s = step % POOL_STEPS
            for idx, n in plans[s]:
                ids = corpus.index_select(0, idx)[:, :n]
                valid = torch.arange(n, device=DEVICE) < lengths.index_select(0, idx)[:, None]
                out.index_copy_(0, idx - s * DOCS, model(ids, valid))  # back to arrival order
            checksum += (out @ probe).double().sum()
            similarity += (out[1:] * out[:-1]).sum().double()
            timer.end()
    timer.report(f"embed_unsorted_lengths variant={args.variant or 'baseline'} probe checksum "
                 f"{checksum.item() / args.steps:.5f} neighbour similarity {similarity.item() / args.steps:.5f} "
                 f"positions/step {positions}")


if __name__ == "__main__":
    main()
