"""FP8 text-embedding inference whose quantizers still run their histogram calibrators in every forward.

Workload: a sentence-embedding service on a BERT-large-width encoder (30,522-token embeddings,
learned positions, 8 pre-norm layers of width 1024, 16 heads of 64, GELU MLP 4096, final LayerNorm,
masked mean pooling, L2 normalisation), 32 texts of 256 tokens per step (lengths 128..256), inference
mode. Every projection (qkv, output, fc1, fc2: 32 linears) was post-training quantized to FP8 (e4m3)
the way `pytorch-quantization` / ModelOpt workflows do it: each `QuantLinear` has an input quantizer
with a histogram calibrator (2,048 bins, 99.99th percentile), calibration was run on two batches,
`load_calib_amax()` set the static input scale, weights were quantized per tensor, and each call
runs `torch._scaled_mm` on the e4m3 input and weight (bf16 out). Calibration was never switched off:
every call still runs the calibrator's `collect()` on its input (`torch.min(x) < 0` and the range
check read on the host, `abs`, a float32 copy, `max`, `torch.histc` over the range, the running
histogram added in), whose result nothing reads.

Variant `calib_off`: `disable_calib()` on every quantizer after `load_calib_amax()`; the same scales,
FP8 GEMMs and embeddings.

No extra variant (the calibrator's host reads rule out a capture, and would split a compiled graph).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, SEQ = 1024, 16, 8, 4096, 30522, 32, 256
else:
    DIM, HEADS, LAYERS, FF, VOCAB, BATCH, SEQ = 64, 4, 2, 256, 500, 2, 16
FP8, FP8_MAX = torch.float8_e4m3fn, 448.0


class HistogramCalibrator:
    """pytorch-quantization's `HistogramCalibrator` (torch_hist=True): a growing histogram of |x|."""

    def __init__(self, num_bins: int = 2048) -> None:
        self.num_bins = num_bins
        self.hist: torch.Tensor | None = None
        self.edges: torch.Tensor | None = None

    @torch.no_grad()
    def collect(self, x: torch.Tensor) -> None:
        if torch.min(x) < 0.0:
            x = x.abs()
        x = x.float()
        x_max = x.max()
        if self.hist is None or self.edges is None:
            self.hist = torch.histc(x, bins=self.num_bins, min=0, max=x_max)
            self.edges = torch.linspace(0, x_max, self.num_bins + 1, device=x.device)
            return
        if x_max > self.edges[-1]:
            width = self.edges[1] - self.edges[0]
            self.num_bins = int((x_max / width).ceil().item())
            self.edges = torch.arange(0, x_max + width, width, device=x.device)
        hist = torch.histc(x, bins=self.num_bins, min=0, max=self.edges[-1])
        hist[: self.hist.numel()] += self.hist
        self.hist = hist

    def compute_amax(self, percentile: float = 99.99) -> torch.Tensor:
        assert self.hist is not None and self.edges is not None
        cdf = torch.cumsum(self.hist / self.hist.sum(), 0)
        idx = torch.searchsorted(cdf, torch.tensor([percentile / 100], device=cdf.device))
        return self.edges[idx.clamp(max=self.edges.numel() - 1)][0].float()


class QuantLinear(nn.Linear):
    """Linear with an FP8 input quantizer (static scale from calibration) and a per-tensor FP8 weight."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(cin, cout)
        self.calibrator = HistogramCalibrator()
        self.calib, self.quant = True, False
        self.input_scale = torch.ones(())
        self.weight_scale = torch.ones(())
        self.weight_fp8 = torch.empty(0)

    def load_calib_amax(self) -> None:
        self.input_scale = self.calibrator.compute_amax() / FP8_MAX
        self.weight_scale = self.weight.detach().abs().amax().float() / FP8_MAX
        self.weight_fp8 = (self.weight.detach() / self.weight_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        self.quant = True

    def disable_calib(self) -> None:
        self.calib = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.calib:
            self.calibrator.collect(x)
        if not self.quant:
            return super().forward(x)
        xq = (x.reshape(-1, x.shape[-1]) / self.input_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        y = torch._scaled_mm(xq, self.weight_fp8.t(), scale_a=self.input_scale, scale_b=self.weight_scale,
                             bias=self.bias, out_dtype=torch.bfloat16)
        return y.view(*x.shape[:-1], -1)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.out = QuantLinear(DIM, 3 * DIM), QuantLinear(DIM, DIM)
        self.fc1, self.fc2 = QuantLinear(DIM, FF), QuantLinear(FF, DIM)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Embedder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.pos[: ids.shape[1]]
        mask = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, mask)
        m = attention_mask[..., None].to(x.dtype)
        return F.normalize(((self.norm(x) * m).sum(1) / m.sum(1)).float(), dim=-1)


def make_batches(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n, BATCH), device=DEVICE, generator=gen)
    ids = torch.randint(1000 if CUDA else 10, VOCAB, (n, BATCH, SEQ), device=DEVICE, generator=gen)
    mask = (torch.arange(SEQ, device=DEVICE) < lengths[..., None]).long()
    return ids * mask, mask


def main() -> None:
    args = options(__doc__, ("calib_off",)).parse_args()
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Embedder().to(torch.bfloat16).eval()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids, masks = make_batches(gen, 6)
    quantizers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    with torch.inference_mode():
        for i in range(2):  # calibration: bf16 forwards, calibrators collecting
            model(ids[i], masks[i])
        for q in quantizers:
            q.load_calib_amax()
            if args.variant == "calib_off":
                q.disable_calib()

        total = torch.zeros((), device=DEVICE, dtype=torch.float64)
        timer = StepTimer()
        for step in range(args.steps):
            timer.tick()
            b = 2 + step % 4
            emb = model(ids[b], masks[b])
            total += (emb[0::2] * emb[1::2]).sum()  # cosine similarity of neighbouring texts
            timer.end()
    timer.report(f"fp8_calibrator_on variant={args.variant or 'baseline'} mean pair similarity "
                 f"{total.item() / (args.steps * (BATCH // 2)):.5f}")


if __name__ == "__main__":
    main()
