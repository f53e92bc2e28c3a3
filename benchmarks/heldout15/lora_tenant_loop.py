"""Multi-tenant LoRA classification served one request at a time, switching the active adapter per request.

Workload: a text-classification service where each of 16 tenants fine-tuned its own rank-16 LoRA
adapter (alpha 32, on the query and value projections, PEFT's defaults for BERT) and an 8-way
classifier head on one shared BERT-base-shaped encoder (30,522 tokens, 12 post-norm layers of width
768, 12 heads of 64, GELU 3,072, pooler; 110M base weights, bf16, inference mode). Each step serves
16 requests, one per tenant, of 64..128 tokens padded to 128 with an attention mask. The requests
are served the way a PEFT model is used with several adapters: for each request
`model.set_adapter(tenant)` (every LoRA layer's active adapter switched) and a batch-1 forward:
16 forwards of ~330 small kernels each.

Variant `batched_lora`: one forward of the 16 requests; each LoRA layer applies every row's own
adapter by gathering the stacked adapter weights by tenant id and two batched GEMMs
(`bmm(bmm(x, A[ids]), B[ids])`, Punica / S-LoRA's multi-adapter batching), and the heads likewise:
the same logits up to the rounding of batch-16 GEMMs.

Variant `cuda_graph` (extra, timed but not recorded): the baseline's 16 batch-1 forwards, adapter
switches included, captured once in a CUDA graph on static request buffers and replayed (the tenant
of each slot is fixed). Without CUDA it runs eagerly.
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, TENANTS, SEQ = 768, 12, 12, 3072, 30522, 16, 128
else:
    DIM, HEADS, LAYERS, FF, VOCAB, TENANTS, SEQ = 32, 4, 2, 64, 500, 4, 16
RANK, ALPHA, LABELS = 16 if CUDA else 4, 32, 8
DTYPE = torch.bfloat16 if CUDA else torch.float32


class LoraLinear(nn.Module):
    """A frozen Linear with one LoRA adapter per tenant (PEFT's `lora.Linear`, adapters in ModuleDicts)."""

    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Linear(DIM, DIM)
        self.lora_A = nn.ModuleDict({str(t): nn.Linear(DIM, RANK, bias=False) for t in range(TENANTS)})
        self.lora_B = nn.ModuleDict({str(t): nn.Linear(RANK, DIM, bias=False) for t in range(TENANTS)})
        self.scaling = ALPHA / RANK
        self.active_adapter = "0"
        self.stacked: tuple[torch.Tensor, torch.Tensor] | None = None

    def stack(self) -> None:
        """The adapters as (TENANTS, DIM, RANK) and (TENANTS, RANK, DIM) tensors for batched serving."""
        a = torch.stack([self.lora_A[str(t)].weight.T for t in range(TENANTS)])
        b = torch.stack([self.lora_B[str(t)].weight.T for t in range(TENANTS)])
        self.stacked = (a.contiguous(), b.contiguous())

    def forward(self, x: torch.Tensor, tenant_ids: torch.Tensor | None) -> torch.Tensor:
        out = self.base(x)
        if tenant_ids is None:
            name = self.active_adapter
            return out + self.lora_B[name](self.lora_A[name](x)) * self.scaling
        assert self.stacked is not None
        a, b = self.stacked
        return out + torch.bmm(torch.bmm(x, a[tenant_ids]), b[tenant_ids]) * self.scaling


class BertLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query, self.value = LoraLinear(), LoraLinear()
        self.key, self.out = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM, eps=1e-12), nn.LayerNorm(DIM, eps=1e-12)
        self.fc1, self.fc2 = nn.Linear(DIM, FF), nn.Linear(FF, DIM)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, tenant_ids: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p.view(b, t, HEADS, d // HEADS).transpose(1, 2)
                   for p in (self.query(x, tenant_ids), self.key(x), self.value(x, tenant_ids)))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class MultiTenantBert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word, self.position, self.token_type = nn.Embedding(VOCAB, DIM), nn.Embedding(512, DIM), nn.Embedding(2, DIM)
        self.ln = nn.LayerNorm(DIM, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer() for _ in range(LAYERS))
        self.pooler = nn.Linear(DIM, DIM)
        self.heads = nn.ModuleDict({str(t): nn.Linear(DIM, LABELS) for t in range(TENANTS)})
        self.active_adapter = "0"
        self.head_stack: tuple[torch.Tensor, torch.Tensor] | None = None

    def set_adapter(self, name: str) -> None:
        """PEFT's `set_adapter`: switch every LoRA layer (and the saved head) to tenant `name`."""
        for module in self.modules():
            if isinstance(module, LoraLinear):
                module.active_adapter = name
        self.active_adapter = name

    def stack_adapters(self) -> None:
        for module in self.modules():
            if isinstance(module, LoraLinear):
                module.stack()
        self.head_stack = (torch.stack([self.heads[str(t)].weight.T for t in range(TENANTS)]).contiguous(),
                           torch.stack([self.heads[str(t)].bias for t in range(TENANTS)])[:, None])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, tenant_ids: torch.Tensor | None = None) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.word(ids) + self.position(pos) + self.token_type(torch.zeros_like(ids)))
        attn_mask = mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, attn_mask, tenant_ids)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        if tenant_ids is None:
            return self.heads[self.active_adapter](pooled)
        assert self.head_stack is not None
        w, bias = self.head_stack
        return (torch.bmm(pooled[:, None], w[tenant_ids]) + bias[tenant_ids])[:, 0]


def main() -> None:
    args = options(__doc__, ("batched_lora", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = MultiTenantBert()
    for m in model.modules():
        if isinstance(m, LoraLinear):  # trained adapters: B is not zero any more
            for t in range(TENANTS):
                nn.init.normal_(m.lora_B[str(t)].weight, std=1.0 / math.sqrt(RANK))
    model = model.to(DTYPE).eval()
    if args.variant == "batched_lora":
        model.stack_adapters()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    n_batches = 4
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n_batches, TENANTS), device=DEVICE, generator=gen)
    all_ids = torch.randint(1000 if CUDA else 10, VOCAB, (n_batches, TENANTS, SEQ), device=DEVICE, generator=gen)
    all_masks = (torch.arange(SEQ, device=DEVICE) < lengths[..., None]).long()
    all_ids = all_ids * all_masks
    all_ids[..., 0] = 101 if CUDA else 1
    tenant_ids = torch.arange(TENANTS, device=DEVICE)  # request i of a step comes from tenant i
    static_ids = torch.empty(TENANTS, SEQ, dtype=torch.long, device=DEVICE)
    static_mask = torch.empty(TENANTS, SEQ, dtype=torch.long, device=DEVICE)
    static_out = torch.empty(0)

    def serve() -> torch.Tensor:
        if args.variant == "batched_lora":
            return model(static_ids, static_mask, tenant_ids)
        outs = []
        for i in range(TENANTS):
            model.set_adapter(str(i))
            outs.append(model(static_ids[i:i + 1], static_mask[i:i + 1]))
        return torch.cat(outs)

    graph: torch.cuda.CUDAGraph | None = None
    confidence = torch.zeros((), device=DEVICE, dtype=torch.float64)
    label_sum = torch.zeros((), device=DEVICE, dtype=torch.long)
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            static_ids.copy_(all_ids[step % n_batches])
            static_mask.copy_(all_masks[step % n_batches])
            if args.variant == "cuda_graph" and CUDA:
                if graph is None:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(2):
                            serve()
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_out = serve()
                graph.replay()
                logits = static_out
            else:
                logits = serve()
            probs = logits.float().softmax(-1)
            confidence += probs.amax(-1).sum()
            label_sum += probs.argmax(-1).sum()
            timer.end()
    timer.report(f"lora_tenant_loop variant={args.variant or 'baseline'} mean confidence "
                 f"{confidence.item() / (args.steps * TENANTS):.5f} label sum {label_sum.item()}")


if __name__ == "__main__":
    main()
