"""Transformer encoder training left with `CUDA_LAUNCH_BLOCKING=1` from a debugging session.

The script sets `os.environ["CUDA_LAUNCH_BLOCKING"] = "1"` before torch is imported (as a debugging
snippet at the top of a training script does), so every kernel launch waits for the kernel to
finish. 6-layer pre-norm `nn.TransformerEncoder` (width 1024, 16 heads), 16 x 256 tokens, 10
classes, bf16 autocast, fused AdamW. Variant `off`: the line removed (and the variable dropped from the environment). The variable only acts if it
is set before CUDA is initialised: a runner that imports torch and starts CUDA before the script
(a profiler) must put `CUDA_LAUNCH_BLOCKING=1` in the environment of the baseline itself; the
script prints whether CUDA was already initialised when it set the variable.
"""

import os
import sys

_OFF = "--variant=off" in sys.argv or any(a == "--variant" and b == "off" for a, b in zip(sys.argv, sys.argv[1:], strict=False))
if not _OFF:
    os.environ["CUDA_LAUNCH_BLOCKING"] = "1"  # left over from debugging an illegal memory access
else:  # the fix: no blocking launches, whatever the caller's environment says
    os.environ.pop("CUDA_LAUNCH_BLOCKING", None)
_CUDA_WAS_ON = "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _common import CUDA, DEVICE, adamw, encoder, options, train  # noqa: E402

VARIANTS = ("off",)
DIM, HEADS, LAYERS, BATCH, SEQ = (1024, 16, 6, 16, 256) if CUDA else (64, 4, 2, 2, 16)
CLASSES = 10


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    print(f"CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING', '')!r}; CUDA initialised before the script set it: {_CUDA_WAS_ON}")
    torch.manual_seed(0)
    body, head, params = encoder(DIM, HEADS, LAYERS, CLASSES)
    opt = adamw(params)
    g = torch.Generator(DEVICE).manual_seed(1)
    data = [(torch.randn(BATCH, SEQ, DIM, device=DEVICE, generator=g),
             torch.randint(0, CLASSES, (BATCH,), device=DEVICE, generator=g)) for _ in range(4)]

    def loss_of(i: int) -> torch.Tensor:
        x, y = data[i % 4]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            logits = head(body(x).mean(1))
        return F.cross_entropy(logits.float(), y)

    train("launch_blocking", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
