"""Molecular-property server whose `reduce-overhead` model meets a new input shape at every call (torch.compile).

Workload: a toxicity predictor over SMILES strings (character tokens with a BOS token, 4 pre-norm
blocks of width 256 with 8 heads, SDPA with a key-padding mask, masked mean pooling, 12 sigmoid
assay outputs, bf16 weights, inference) serving dynamically batched requests: each call takes the
16-64 molecules waiting in the queue, padded to the longest of them (12-128 tokens), 16 calls per
step. The model is compiled with `torch.compile(model, mode="reduce-overhead", dynamic=True)`:
`dynamic=True` keeps Dynamo from recompiling for each new size.

Cause (baseline): CUDA graphs are recorded per distinct input shape (inductor's CUDA-graph trees
record one graph for each new (batch, length) pair, and run a new pair's first call as an
un-captured warm-up). With a fresh (batch, length) pair at almost every call (116 of the 128 calls
of steps 4-11), nearly every call is such a warm-up or a recording: the ~40 compiled kernels of a
call are launched one by one, the small, launch-bound forward never gets a replay, and torch warns
that it has seen many distinct sizes and suggests padding.

Fix (`--variant bucketed_shapes`): pad every call to a few fixed shapes, the batch to a multiple of
16 and the length to a multiple of 32 (at most 16 shapes, 7 occur; padding rows hold only the BOS
token, and padded positions are masked as before): after the first steps every call replays a
recorded graph. The real molecules' predictions are the same (masked keys add nothing); GEMMs and
attention over other shapes may choose other kernels, so the last bits of the bf16 outputs may
differ.
"""

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

VARIANTS = ("bucketed_shapes",)
DIM, HEADS, LAYERS, MAXLEN, CALLS = (256, 8, 4, 128, 16) if CUDA else (32, 4, 2, 32, 3)
MIN_BATCH, MAX_BATCH, BATCH_STEP, LEN_STEP = (16, 64, 16, 32) if CUDA else (2, 8, 4, 8)
VOCAB, TASKS, BOS = 64, 12, 1
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.up, self.down = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, attn_mask=keys).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class ToxModel(nn.Module):
    """Token and position embeddings, pre-norm blocks, masked mean pooling, 12 assay probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(MAXLEN, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, TASKS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        real = tokens != 0
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        keys = real[:, None, None, :]
        for block in self.blocks:
            x = block(x, keys)
        keep = real.unsqueeze(-1).to(x.dtype)
        pooled = (self.norm(x) * keep).sum(1) / keep.sum(1)
        return torch.sigmoid(self.head(pooled))


def request_batches(n_calls: int) -> list[list[np.ndarray]]:
    """The queue's content at each call: 16-64 molecules, each BOS + 11-127 SMILES character ids."""
    rng = np.random.default_rng(0)
    calls = []
    for _ in range(n_calls):
        size = int(rng.integers(MIN_BATCH, MAX_BATCH + 1))
        lengths = np.clip(rng.normal(0.4 * MAXLEN, 0.15 * MAXLEN, size).astype(int), MAXLEN // 10, MAXLEN - 1)
        calls.append([np.concatenate([[BOS], rng.integers(2, VOCAB, n)]) for n in lengths])
    return calls


def pad(mols: list[np.ndarray], bucketed: bool) -> torch.Tensor:
    """Right-padded (batch, length) ids: to the longest molecule, or up to the next bucket in both dims."""
    rows, width = len(mols), max(len(m) for m in mols)
    if bucketed:
        rows = -(-rows // BATCH_STEP) * BATCH_STEP
        width = min(-(-width // LEN_STEP) * LEN_STEP, MAXLEN)
    out = np.zeros((rows, width), dtype=np.int64)
    out[:, 0] = BOS  # padding rows: the BOS token alone
    for row, m in zip(out, mols, strict=False):
        row[: len(m)] = m
    return torch.from_numpy(out).to(DEVICE)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    bucketed = args.variant == "bucketed_shapes"
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = ToxModel().to(DTYPE).eval().requires_grad_(False)
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=True)
    calls = request_batches(args.steps * CALLS)
    inputs = [(pad(mols, bucketed), len(mols)) for mols in calls]  # on the device before the loop
    out = torch.zeros(MAX_BATCH, TASKS, device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            for tokens, n in inputs[i * CALLS:(i + 1) * CALLS]:
                torch.compiler.cudagraph_mark_step_begin()
                probs = compiled(tokens)
                out[:n] += probs[:n]  # consumed before the next call overwrites the graph's output
            timer.end()
    timer.report(f"smiles_cudagraph_every_shape variant={args.variant or 'baseline'} "
                 f"probability sum {out.sum().item():.4f}")


if __name__ == "__main__":
    main()
