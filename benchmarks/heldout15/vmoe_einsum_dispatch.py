"""Vision-MoE training whose expert dispatch and combine are dense einsums over a one-hot (S, E, C) tensor.

Workload: training a V-MoE-S/16-shaped image classifier (16 px patches of 224 x 224: 196 patches and
a class token; 12 pre-norm blocks of width 384, 6 heads; every other block's MLP replaced by a
top-1 mixture of 8 experts of 384 -> 1,536 -> 384; 1,000 classes; 72M weights), 64 images per step
from a GPU uint8 pool, bf16 autocast, fused AdamW, cross-entropy + 0.01 x the load-balancing loss.
The MoE layers are routed the way DeepSpeed-MoE's `top1gating` / `MOELayer` (after GShard) do it,
over all S = 12,608 tokens of the step with capacity factor 1.25 (C = 1,970 slots per expert,
`use_rts=False`): the gate builds `combine_weights = einsum("se,sc->sec", gates * mask, one_hot(
location, C))` (S x E x C = 199M entries), `dispatch_mask = combine_weights.bool()`, and the tokens
move with `einsum("sec,sm->ecm", dispatch_mask, x)` and back with `einsum("sec,ecm->sm",
combine_weights, expert_out)`: GEMMs whose contraction runs over all tokens or all E x C slots
(K = 12,608 / 15,760) for what is a copy of one row per token (0.15 TFLOP each, five of them with the
backward, per MoE layer), beside several passes over the 199M-entry masks.

Variant `index_dispatch`: the same routing (argmax expert, position by cumulative sum, tokens past
capacity dropped) with the tokens moved by index: `index_copy` of each token into slot
`expert * C + location` (dropped ones into a spare row), and the combine as a gather of its slot
times its gate; the same outputs, gradients and losses (up to the bf16 rounding of the gate product).

Variant `compiled` (extra, timed but not recorded): the baseline model under `torch.compile`
(default mode).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, options
from torch import nn

if CUDA:
    IMG, PATCH, DIM, HEADS, DEPTH, EXPERTS, FF, BATCH, CLASSES, POOL = 224, 16, 384, 6, 12, 8, 1536, 64, 1000, 256
else:
    IMG, PATCH, DIM, HEADS, DEPTH, EXPERTS, FF, BATCH, CLASSES, POOL = 32, 8, 32, 2, 2, 4, 64, 4, 10, 8
TOKENS = (IMG // PATCH) ** 2 + 1
CAPACITY_FACTOR, AUX_WEIGHT = 1.25, 0.01
S = BATCH * TOKENS
CAPACITY = math.ceil(S / EXPERTS * CAPACITY_FACTOR)


def top1_route(logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """DeepSpeed's top1gating without noise or random token selection: gates (S, E) float32, the chosen
    expert, its position in that expert's queue, the kept mask (S, E) and the load-balancing loss."""
    gates = F.softmax(logits.float(), dim=1)
    indices = torch.argmax(gates, dim=1)
    mask = F.one_hot(indices, EXPERTS)
    locations = torch.cumsum(mask, dim=0) - 1
    l_aux = torch.sum(gates.mean(0) * mask.float().mean(0)) * EXPERTS
    mask = mask * (locations < CAPACITY)
    location_s = torch.sum(locations * mask, dim=1)
    return gates, indices, location_s, mask, l_aux


class MoEMLP(nn.Module):
    """Top-1 mixture of experts; the experts' weights stacked and applied with batched GEMMs over (E, C, M)."""

    def __init__(self, index_dispatch: bool) -> None:
        super().__init__()
        self.index_dispatch = index_dispatch
        self.gate = nn.Linear(DIM, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.randn(EXPERTS, DIM, FF) / math.sqrt(DIM))
        self.b1 = nn.Parameter(torch.zeros(EXPERTS, 1, FF))
        self.w2 = nn.Parameter(torch.randn(EXPERTS, FF, DIM) / math.sqrt(FF))
        self.b2 = nn.Parameter(torch.zeros(EXPERTS, 1, DIM))

    def experts(self, dispatched: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.b2, F.gelu(torch.baddbmm(self.b1, dispatched, self.w1)), self.w2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, DIM)
        gates, indices, location_s, mask, l_aux = top1_route(self.gate(x))
        if not self.index_dispatch:  # DeepSpeed MOELayer: dense dispatch and combine
            location_sc = F.one_hot(location_s, CAPACITY).float()
            combine_weights = torch.einsum("se,sc->sec", gates * mask, location_sc)
            dispatch_mask = combine_weights.bool()
            dispatched = torch.einsum("sec,sm->ecm", dispatch_mask.type_as(x), x)
            out = self.experts(dispatched)
            y = torch.einsum("sec,ecm->sm", combine_weights.type_as(x), out)
        else:
            kept = mask.sum(1) > 0
            gate_s = (gates * mask).sum(1)
            slot = torch.where(kept, indices * CAPACITY + location_s, EXPERTS * CAPACITY)
            buffer = x.new_zeros(EXPERTS * CAPACITY + 1, DIM).index_copy(0, slot, x)
            out = self.experts(buffer[:-1].view(EXPERTS, CAPACITY, DIM))
            flat = torch.cat([out.reshape(-1, DIM), out.new_zeros(1, DIM)])
            y = flat[slot] * gate_s[:, None].to(flat.dtype)
        return y.reshape(shape), l_aux


class Block(nn.Module):
    def __init__(self, moe: bool, index_dispatch: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM, eps=1e-6), nn.LayerNorm(DIM, eps=1e-6)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.moe = MoEMLP(index_dispatch) if moe else None
        self.mlp = None if moe else nn.Sequential(nn.Linear(DIM, FF), nn.GELU(), nn.Linear(FF, DIM))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d))
        if self.moe is not None:
            y, l_aux = self.moe(self.norm2(x))
            return x + y, l_aux
        return x + self.mlp(self.norm2(x)), x.new_zeros(())  # type: ignore[misc]


class VMoE(nn.Module):
    def __init__(self, index_dispatch: bool) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, TOKENS, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(i % 2 == 1, index_dispatch) for i in range(DEPTH))
        self.norm, self.head = nn.LayerNorm(DIM, eps=1e-6), nn.Linear(DIM, CLASSES)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        aux = x.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            x, l_aux = block(x)
            aux = aux + l_aux
        return self.head(self.norm(x)[:, 0]), aux


def main() -> None:
    args = options(__doc__, ("index_dispatch", "compiled")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = VMoE(index_dispatch=args.variant == "index_dispatch")
    net = torch.compile(model) if args.variant == "compiled" else model
    opt = adamw(list(model.parameters()))
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, IMG, IMG), dtype=torch.uint8, device=DEVICE, generator=gen)
    pool_labels = torch.randint(0, CLASSES, (POOL,), device=DEVICE, generator=gen)
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255

    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    aux_total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for _ in range(args.steps):
        timer.tick()
        idx = torch.randint(0, POOL, (BATCH,), device=DEVICE, generator=gen)
        x = (pool[idx].float() - mean) / std
        with bf16():
            logits, aux = net(x)
            loss = F.cross_entropy(logits.float(), pool_labels[idx]) + AUX_WEIGHT * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        aux_total += aux.detach()
        timer.end()
    timer.report(f"vmoe_einsum_dispatch variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f} "
                 f"mean aux {aux_total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
