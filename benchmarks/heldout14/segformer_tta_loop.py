"""Aerial-image segmentation with 8-view dihedral test-time augmentation run one view at a time.

Workload: inference of a SegFormer-B0-shaped model (Mix Transformer encoder: overlapping patch
embeddings, 4 stages of width 32 / 64 / 160 / 256 with 1 / 2 / 5 / 8 heads, 2 blocks each,
spatial-reduction attention with ratios 8 / 4 / 2 / 1, Mix-FFN with a depthwise 3x3 conv; all-MLP
decoder to 256 channels, 6 land-cover classes, bilinear upsampling), bf16 weights, inference mode, 4
tiles of 256 x 256 per step from a GPU-resident uint8 pool. Predictions are averaged over the 8
dihedral transforms (4 rotations by 90 degrees, each with and without a horizontal flip), the way
`ttach`'s `SegmentationTTAWrapper` does it: for each transform, augment the batch, run the model,
undo the transform on the logits and add them up: 8 forwards of batch 4.

Variant `batched_views`: the 8 augmented views concatenated into one batch of 32, one forward, the
logits split back into 8 and de-augmented; the same per-view computation.

Variant `cuda_graph` (extra, timed but not recorded): the baseline's whole step (8 forwards, the
de-augmentation and the merge) captured once in a CUDA graph on a static input and replayed. Without
CUDA it runs eagerly.
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    WIDTHS, HEADS, DEPTHS, DECODER, TILE, BATCH, POOL = (32, 64, 160, 256), (1, 2, 5, 8), (2, 2, 2, 2), 256, 256, 4, 16
else:
    WIDTHS, HEADS, DEPTHS, DECODER, TILE, BATCH, POOL = (8, 16, 16, 32), (1, 2, 2, 4), (1, 1, 1, 1), 16, 64, 2, 4
SR_RATIOS, CLASSES = (8, 4, 2, 1), 6
DTYPE = torch.bfloat16 if CUDA else torch.float32
TRANSFORMS = [(k, flip) for k in range(4) for flip in (False, True)]


def augment(x: torch.Tensor, k: int, flip: bool) -> torch.Tensor:
    x = torch.rot90(x, k, (2, 3))
    return torch.flip(x, (3,)) if flip else x


def deaugment(y: torch.Tensor, k: int, flip: bool) -> torch.Tensor:
    y = torch.flip(y, (3,)) if flip else y
    return torch.rot90(y, -k, (2, 3))


class EfficientAttention(nn.Module):
    """Multi-head attention whose keys and values come from a spatially reduced map (stride `sr`)."""

    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.heads, self.sr = heads, sr
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        if sr > 1:
            self.reduce, self.norm = nn.Conv2d(dim, dim, sr, sr), nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b, n, c = x.shape
        q = self.q(x).view(b, n, self.heads, c // self.heads).transpose(1, 2)
        if self.sr > 1:
            x = self.norm(self.reduce(x.transpose(1, 2).reshape(b, c, h, w)).flatten(2).transpose(1, 2))
        k, v = self.kv(x).view(b, -1, 2, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, c))


class MixFFN(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.dw = nn.Conv2d(4 * dim, 4 * dim, 3, padding=1, groups=4 * dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        b = x.shape[0]
        x = self.fc1(x)
        x = self.dw(x.transpose(1, 2).reshape(b, -1, h, w)).flatten(2).transpose(1, 2)
        return self.fc2(F.gelu(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, sr: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn, self.ffn = EfficientAttention(dim, heads, sr), MixFFN(dim)

    def forward(self, x: torch.Tensor, h: int, w: int) -> torch.Tensor:
        x = x + self.attn(self.n1(x), h, w)
        return x + self.ffn(self.n2(x), h, w)


class Stage(nn.Module):
    def __init__(self, cin: int, dim: int, heads: int, sr: int, depth: int, first: bool) -> None:
        super().__init__()
        k, s = (7, 4) if first else (3, 2)
        self.embed, self.embed_norm = nn.Conv2d(cin, dim, k, s, k // 2), nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(Block(dim, heads, sr) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        b, c, h, w = x.shape
        x = self.embed_norm(x.flatten(2).transpose(1, 2))
        for block in self.blocks:
            x = block(x, h, w)
        return self.norm(x).transpose(1, 2).reshape(b, c, h, w)


class SegFormer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        cins = (3, *WIDTHS[:-1])
        self.stages = nn.ModuleList(Stage(cins[i], WIDTHS[i], HEADS[i], SR_RATIOS[i], DEPTHS[i], i == 0) for i in range(4))
        self.lateral = nn.ModuleList(nn.Linear(w, DECODER) for w in WIDTHS)
        self.fuse = nn.Sequential(nn.Conv2d(4 * DECODER, DECODER, 1, bias=False), nn.BatchNorm2d(DECODER), nn.ReLU())
        self.classify = nn.Conv2d(DECODER, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        quarter = feats[0].shape[-2:]
        ups = []
        for f, lateral in zip(feats, self.lateral, strict=True):
            b, _, h, w = f.shape
            g = lateral(f.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(b, -1, h, w)
            ups.append(F.interpolate(g, size=quarter, mode="bilinear", align_corners=False) if (h, w) != quarter else g)
        logits = self.classify(self.fuse(torch.cat(ups[::-1], 1)))
        return F.interpolate(logits, size=size, mode="bilinear", align_corners=False)


def main() -> None:
    args = options(__doc__, ("batched_views", "cuda_graph")).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = SegFormer().to(DTYPE).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, TILE, TILE), dtype=torch.uint8, device=DEVICE, generator=gen)
    mean = torch.tensor([0.485, 0.456, 0.406], device=DEVICE).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=DEVICE).view(1, 3, 1, 1) * 255

    def predict(x: torch.Tensor) -> torch.Tensor:
        """Mean logits over the 8 dihedral views."""
        if args.variant == "batched_views":
            outs = model(torch.cat([augment(x, k, f) for k, f in TRANSFORMS])).chunk(len(TRANSFORMS))
            merged = sum(deaugment(o, k, f) for o, (k, f) in zip(outs, TRANSFORMS, strict=True))
        else:
            merged = sum(deaugment(model(augment(x, k, f)), k, f) for k, f in TRANSFORMS)
        return merged / len(TRANSFORMS)  # type: ignore[operator]

    conf = torch.zeros((), device=DEVICE, dtype=torch.float64)
    labels = torch.zeros((), device=DEVICE, dtype=torch.long)
    static_x = torch.empty(BATCH, 3, TILE, TILE, device=DEVICE, dtype=DTYPE)
    static_out = torch.empty(0)
    graph: torch.cuda.CUDAGraph | None = None
    timer = StepTimer()
    with torch.inference_mode():
        for step in range(args.steps):
            timer.tick()
            first = (step * BATCH) % POOL
            static_x.copy_((pool[first:first + BATCH].float() - mean) / std)
            if args.variant == "cuda_graph" and CUDA:
                if graph is None:
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for _ in range(2):
                            predict(static_x)
                    torch.cuda.current_stream().wait_stream(side)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        static_out = predict(static_x)
                graph.replay()
                merged = static_out
            else:
                merged = predict(static_x)
            probs = merged.float().softmax(1)
            conf += probs.amax(1).mean()
            labels += probs.argmax(1).sum()
            timer.end()
    timer.report(f"segformer_tta_loop variant={args.variant or 'baseline'} mean confidence "
                 f"{conf.item() / args.steps:.5f} label sum {labels.item()}")


if __name__ == "__main__":
    main()
