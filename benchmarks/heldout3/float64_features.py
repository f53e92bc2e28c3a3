"""A tabular regression MLP trained in float64 because its features came from a float64 numpy array
(`torch.from_numpy` keeps float64, so the model was made `.double()` to match).

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout3/float64_features.py
Variants: --variant tf32 (features and model in float32, matmuls allowed TF32 with
`torch.set_float32_matmul_precision("high")`), --variant bf16 (float32 model and features, bf16
autocast). Same initial weights and data. On the GPU: 65,536 x 512 features uploaded once, batches of
8192 rows, MLP 512 -> 2048 -> 2048 -> 2048 -> 1 with SiLU, MSE loss, Adam. Each step ends with
tracekit.step().
"""

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


def main() -> None:
    args = options(__doc__, ("tf32", "bf16")).parse_args()
    rows, feat, hidden, batch = (65536, 512, 2048, 8192) if CUDA else (256, 16, 32, 64)
    rng = np.random.default_rng(0)
    features = rng.standard_normal((rows, feat))  # float64, as numpy makes it
    target = features[:, :8].sum(1) + 0.1 * rng.standard_normal(rows)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(feat, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1)
    )
    dtype = torch.float64 if args.variant is None else torch.float32
    if args.variant == "tf32":
        torch.set_float32_matmul_precision("high")
    model = model.to(DEVICE, dtype)
    x_all = torch.from_numpy(features).to(DEVICE, dtype)
    y_all = torch.from_numpy(target).to(DEVICE, dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    def loss_of(i: int) -> torch.Tensor:
        lo = (i * batch) % rows
        x, y = x_all[lo : lo + batch], y_all[lo : lo + batch]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA and args.variant == "bf16"):
            pred = model(x).squeeze(-1)
        return F.mse_loss(pred.to(dtype), y)

    train("float64_features", args.variant, args.steps, opt, loss_of)

if __name__ == "__main__":
    main()
