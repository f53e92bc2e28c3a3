"""Point-cloud classifier (DGCNN-style EdgeConv) whose k-nearest-neighbour graph is built with numpy on the training thread.

Host-side work. 16 point clouds of 512 points per step, quantised coordinates (int16, 0..1023) held
in host memory; for each cloud the training loop computes its 20 nearest neighbours with numpy
(float64 squared distances from `p @ p.T`, keys `d * N + j` so that ties break by index,
`np.argpartition`, then a sort of the 20), stacks the (16, 512, 20) index array and uploads it with
the points. The model: three EdgeConv layers on that static graph (edge features [x_i, x_j - x_i],
Linear + LeakyReLU(0.2), max over the 20 neighbours; 3 -> 64 -> 64 -> 128 channels), Linear 256 ->
512, global max pool, MLP 512 -> 256 -> 40 classes, bf16 autocast, fused AdamW.

Variant `gpu_knn`: the points are uploaded alone and the same neighbours are found on the GPU
(float64 `bmm` distances, the same keys, `torch.topk(..., largest=False)`), identical indices.
"""

import numpy as np
import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, bf16, options, train
from torch import nn

VARIANTS = ("gpu_knn",)
BATCH, POINTS, K, CLASSES = (16, 512, 20, 40) if CUDA else (4, 64, 8, 10)


def knn_numpy(cloud: np.ndarray) -> np.ndarray:
    """(N, 3) integer coordinates -> (N, K) neighbour indices, nearest first (self included)."""
    p = cloud.astype(np.float64)
    sq = (p * p).sum(1)
    d = sq[:, None] + sq[None, :] - 2.0 * (p @ p.T)
    key = d * p.shape[0] + np.arange(p.shape[0])[None, :]
    part = np.argpartition(key, K - 1, axis=1)[:, :K]
    order = np.argsort(np.take_along_axis(key, part, 1), axis=1)
    return np.take_along_axis(part, order, 1)


def knn_torch(clouds: torch.Tensor) -> torch.Tensor:
    """(B, N, 3) integer coordinates on the device -> (B, N, K), the same keys and order as knn_numpy."""
    p = clouds.double()
    sq = (p * p).sum(-1)
    d = sq[:, :, None] + sq[:, None, :] - 2.0 * torch.bmm(p, p.transpose(1, 2))
    key = d * p.shape[1] + torch.arange(p.shape[1], device=p.device, dtype=p.dtype)
    return torch.topk(key, K, dim=-1, largest=False, sorted=True).indices


class EdgeConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.lin = nn.Linear(2 * cin, cout)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        x_j = x.gather(1, idx.reshape(b, n * K, 1).expand(b, n * K, c)).view(b, n, K, c)
        x_i = x.unsqueeze(2).expand(b, n, K, c)
        return F.leaky_relu(self.lin(torch.cat((x_i, x_j - x_i), -1)), 0.2).amax(2)


class DGCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList([EdgeConv(3, 64), EdgeConv(64, 64), EdgeConv(64, 128)])
        self.mix = nn.Linear(256, 512)
        self.head = nn.Sequential(nn.Linear(512, 256), nn.LeakyReLU(0.2), nn.Linear(256, CLASSES))

    def forward(self, pts: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        feats, x = [], pts
        for conv in self.convs:
            x = conv(x, idx)
            feats.append(x)
        x = F.leaky_relu(self.mix(torch.cat(feats, -1)), 0.2).amax(1)
        return self.head(x)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    model = DGCNN().to(DEVICE)
    opt = adamw(list(model.parameters()))
    rng = np.random.default_rng(0)
    pool = 4
    scale = rng.uniform(0.3, 1.0, size=(pool, BATCH, 1, 3))
    clouds = (rng.random((pool, BATCH, POINTS, 3)) * scale * 1023).astype(np.int16)  # host-resident dataset
    labels = torch.from_numpy(rng.integers(0, CLASSES, size=(pool, BATCH))).to(DEVICE)

    def loss_of(i: int) -> torch.Tensor:
        batch = clouds[i % pool]
        pts_int = torch.from_numpy(batch).to(DEVICE)
        if args.variant == "gpu_knn":
            idx = knn_torch(pts_int)
        else:
            idx = torch.from_numpy(np.stack([knn_numpy(c) for c in batch])).to(DEVICE)
        with bf16():
            logits = model(pts_int.float() / 1023.0, idx)
        return F.cross_entropy(logits.float(), labels[i % pool])

    train("numpy_knn", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
