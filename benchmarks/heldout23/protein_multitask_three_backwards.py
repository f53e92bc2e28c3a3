"""Multi-task protein structure-property training: one backward per task loss, each retaining the graph.

A NetSurfP-style per-residue predictor: amino-acid tokens (crops of 512 residues, 32 crops per step)
through a pre-norm transformer trunk (8 blocks of width 768, 12 heads, SDPA, bf16 autocast, fused
AdamW) and three heads: 8-state secondary structure (cross-entropy), relative solvent accessibility
(sigmoid, squared error) and disorder (binary cross-entropy). The baseline, written like multi-loss
code copied from GAN and auxiliary-loss recipes, calls `backward(retain_graph=True)` on each task's
weighted loss in turn: the whole trunk's backward (two thirds of the step's GEMM work) runs three
times, and every trunk gradient is accumulated three times.

--variant one_backward: the three weighted losses summed and one `backward()`: the trunk's backward
runs once with the summed gradient from the three heads.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, AttnBlock, StepTimer, adamw, bf16, options
from torch import nn

args = options(__doc__, ("one_backward",)).parse_args()
if CUDA:
    DIM, HEADS, LAYERS, BATCH, LEN, BANK = 768, 12, 8, 32, 512, 128
else:
    DIM, HEADS, LAYERS, BATCH, LEN, BANK = 64, 4, 2, 4, 32, 8
AMINO, SS_STATES = 21, 8  # 20 amino acids + unknown; DSSP 8-state labels
W_SS, W_RSA, W_DIS = 1.0, 0.5, 0.5


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


class ProteinTrunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(AMINO, DIM)
        self.pos = nn.Parameter(torch.randn(LEN, DIM) * 0.02)
        self.blocks = nn.ModuleList([AttnBlock(DIM, HEADS) for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(DIM)
        self.ss = nn.Linear(DIM, SS_STATES)
        self.rsa = nn.Linear(DIM, 1)
        self.dis = nn.Linear(DIM, 1)

    def forward(self, seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.tok(seq) + self.pos
        for blk in self.blocks:
            x = blk(x, attend)
        h = self.norm(x)
        return self.ss(h), self.rsa(h).squeeze(-1), self.dis(h).squeeze(-1)


torch.manual_seed(0)
with torch.device(DEVICE):
    model = ProteinTrunk()
opt = adamw(list(model.parameters()))
gen = torch.Generator(DEVICE).manual_seed(23)
seqs = torch.randint(0, AMINO, (BANK, LEN), device=DEVICE, generator=gen)
ss_lab = torch.randint(0, SS_STATES, (BANK, LEN), device=DEVICE, generator=gen)
rsa_lab = torch.rand(BANK, LEN, device=DEVICE, generator=gen)
dis_lab = (torch.rand(BANK, LEN, device=DEVICE, generator=gen) < 0.1).float()


def task_losses(i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = torch.arange(i * BATCH, (i + 1) * BATCH, device=DEVICE) % BANK
    with bf16():
        ss, rsa, dis = model(seqs[rows])
    l_ss = F.cross_entropy(ss.float().flatten(0, 1), ss_lab[rows].flatten())
    l_rsa = F.mse_loss(torch.sigmoid(rsa.float()), rsa_lab[rows])
    l_dis = F.binary_cross_entropy_with_logits(dis.float(), dis_lab[rows])
    return W_SS * l_ss, W_RSA * l_rsa, W_DIS * l_dis


total = torch.zeros((), device=DEVICE, dtype=torch.float64)
timer = StepTimer()
for i in range(args.steps):
    timer.tick()
    losses = task_losses(i)
    opt.zero_grad(set_to_none=True)
    if args.variant == "one_backward":
        sum(losses).backward()
    else:  # one backward per task, the graph kept for the next one
        for j, loss in enumerate(losses):
            loss.backward(retain_graph=j < len(losses) - 1)
    opt.step()
    total += sum(loss.detach() for loss in losses)
    del losses
    timer.end()
timer.report(f"protein_multitask_three_backwards variant={args.variant or 'baseline'} "
             f"mean loss {total.item() / args.steps:.5f}")
