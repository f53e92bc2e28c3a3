"""Recommendation-model inference on int8-quantised embedding tables that are dequantised whole on every call, then looked up.

8 tables of 4,194,304 rows x 128 int8 values (per-row bf16 scales; 4.3 GB in all), one id per table
per sample, batch 16,384, the 8 looked-up rows concatenated (1,024 features) into a bf16 MLP
1024 -> 1024 -> 512 -> 1; 8 calls per step (4 fixed id batches in turn), inference mode.
Baseline: `F.embedding(ids, table.to(bf16) * scale[:, None])`: each table converted and scaled in
full (0.5 GB read, 2 GB written, 1 GB re-read per table per call) for 16,384 rows. Variant
`gather_first`: `table[ids].to(bf16) * scale[ids, None]`: the same rows, converted after the
lookup. Identical values.
"""

import runpy
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

C = runpy.run_path(str(Path(__file__).resolve().parent / "_common.py"))
VARIANTS = ("gather_first",)


def main() -> None:
    args = C["options"](__doc__, VARIANTS).parse_args()
    cuda, dev = C["CUDA"], C["DEVICE"]
    ntab, rows, width, batch, calls = (8, 1 << 22, 128, 16384, 8) if cuda else (3, 500, 16, 64, 2)
    dt = torch.bfloat16
    torch.manual_seed(0)
    g = torch.Generator(device=dev).manual_seed(1)
    tables = [torch.randint(-127, 128, (rows, width), dtype=torch.int8, device=dev, generator=g) for _ in range(ntab)]
    scales = [(torch.rand(rows, device=dev, generator=g) * 0.02 + 0.001).to(dt) for _ in range(ntab)]
    mlp = nn.Sequential(nn.Linear(ntab * width, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1)).to(dev, dt)
    ids = [torch.randint(0, rows, (ntab, batch), device=dev, generator=g) for _ in range(4)]

    def lookup(t: int, idx: torch.Tensor) -> torch.Tensor:
        if args.variant == "gather_first":
            return tables[t][idx].to(dt) * scales[t][idx, None]
        return F.embedding(idx, tables[t].to(dt) * scales[t][:, None])

    timer, total = C["StepTimer"](), torch.zeros((), dtype=torch.float64, device=dev)
    with torch.inference_mode():
        for i in range(args.steps):
            timer.tick()
            for c in range(calls):
                batch_ids = ids[(i * calls + c) % 4]
                feats = torch.cat([lookup(t, batch_ids[t]) for t in range(ntab)], dim=1)
                total += mlp(feats).float().sum()
            timer.end()
    timer.report(f"int8_embedding variant={args.variant or 'baseline'} output checksum {total.item():.6f}")


if __name__ == "__main__":
    main()
