"""A cross-encoder reranker that scores a query's candidate passages one (query, passage) pair at a time.

Second stage of a search service: a MiniLM-L6-H384-shaped BERT cross-encoder (6 post-norm layers of
width 384, 12 heads of 32, GELU 1536, 30,522-token vocabulary, token types, pooler, one relevance
logit) in the Hugging Face BERT layout, bf16, inference mode. Each step reranks 48 candidates for a
query: `[CLS] query [SEP] passage [SEP]` of 110-192 tokens, already tokenised on the GPU. The
service calls `model(input_ids[None], token_type_ids[None])` per pair (batch 1, its own length,
no padding) and takes the top 10 of the 48 scores. Variant `batched`: the 48 pairs padded to the
longest with an attention mask, one forward, the same top 10.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

args = options(__doc__, ("batched",)).parse_args()
torch.manual_seed(0)
if CUDA:
    HIDDEN, LAYERS, HEADS, INTER, VOCAB, CANDIDATES, QLEN, PLEN = 384, 6, 12, 1536, 30522, 48, (12, 21), (95, 170)
    DTYPE = torch.bfloat16
else:
    HIDDEN, LAYERS, HEADS, INTER, VOCAB, CANDIDATES, QLEN, PLEN = 32, 2, 4, 64, 300, 12, (3, 6), (5, 12)
    DTYPE = torch.float32
HD = HIDDEN // HEADS
CLS, SEP = 101 if CUDA else 1, 102 if CUDA else 2


class BertEmbeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(512, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + self.position_embeddings(positions)
        return self.LayerNorm(x)


class BertLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN)
        self.attention_output = nn.Linear(HIDDEN, HIDDEN)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate, self.output = nn.Linear(HIDDEN, INTER), nn.Linear(INTER, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, HEADS, HD).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)), attn_mask=mask)
        x = self.attention_norm(x + self.attention_output(ctx.transpose(1, 2).reshape(b, t, HIDDEN)))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class CrossEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings()
        self.layers = nn.ModuleList([BertLayer() for _ in range(LAYERS)])
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, 1)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))[:, 0]


with torch.device(DEVICE):
    model = CrossEncoder()
model = model.to(DTYPE).eval()

# one query and its candidates, tokenised: [CLS] q [SEP] p [SEP], token types 0 then 1
gen = torch.Generator().manual_seed(1)
query = torch.randint(1000 if CUDA else 3, VOCAB, (int(torch.randint(*QLEN, (1,), generator=gen)),), generator=gen)
pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
for _ in range(CANDIDATES):
    passage = torch.randint(1000 if CUDA else 3, VOCAB, (int(torch.randint(*PLEN, (1,), generator=gen)),), generator=gen)
    ids = torch.cat([torch.tensor([CLS]), query, torch.tensor([SEP]), passage, torch.tensor([SEP])])
    types = torch.cat([torch.zeros(len(query) + 2, dtype=torch.long), torch.ones(len(passage) + 1, dtype=torch.long)])
    pairs.append((ids.to(DEVICE), types.to(DEVICE)))
longest = max(len(ids) for ids, _ in pairs)
batch_ids = torch.zeros(CANDIDATES, longest, dtype=torch.long, device=DEVICE)
batch_types = torch.zeros_like(batch_ids)
batch_mask = torch.zeros_like(batch_ids)
for j, (ids, types) in enumerate(pairs):
    batch_ids[j, : len(ids)], batch_types[j, : len(ids)], batch_mask[j, : len(ids)] = ids, types, 1

score_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
top_sum = torch.zeros((), device=DEVICE, dtype=torch.long)
timer = StepTimer()
with torch.inference_mode():
    for _ in range(args.steps):
        timer.tick()
        if args.variant == "batched":
            scores = model(batch_ids, batch_types, batch_mask)
        else:
            scores = torch.cat([model(ids[None], types[None]) for ids, types in pairs])
        top = scores.float().topk(10)
        score_sum += top.values.sum()
        top_sum += top.indices.sum()
        timer.end()
timer.report(f"rerank_per_pair variant={args.variant or 'baseline'} top-10 score checksum "
             f"{score_sum.item() / args.steps:.4f} index sum {top_sum.item()}")
