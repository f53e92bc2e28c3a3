"""Time of the per-channel sum of a 4-D activation gradient (a convolution's bias gradient: sum over N, H, W) in NCHW and in channels_last, bf16 and fp32, for several channel counts; bare, CUDA events.

Run on the GPU machine: python3 benchmarks/gpu/channel_sum_layouts.py > channel_sum_layouts.txt
Each tensor holds 16 x C x H x W values with H = W chosen so that it is ~64 MiB in fp32 (~32 MiB bf16);
prints µs per sum (median of 5 runs of 50 sums) and GB/s of the read, per layout, and the ratio.
"""

import statistics

import torch


def timed_us(t: torch.Tensor) -> float:
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t.sum(dim=(0, 2, 3))
        a.record()
        for _ in range(50):
            t.sum(dim=(0, 2, 3))
        b.record()
        torch.cuda.synchronize()
        runs.append(a.elapsed_time(b) * 1000 / 50)
    return statistics.median(runs)


def main() -> None:
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    print("dtype C H=W nchw_us nhwc_us nchw_GB/s nhwc_GB/s nhwc/nchw")
    for dtype in (torch.bfloat16, torch.float32):
        for c in (16, 32, 64, 128, 256, 512):
            hw = round((16 * 2**20 / (16 * c)) ** 0.5)
            t = torch.randn(16, c, hw, hw, device="cuda", dtype=dtype)
            cl = t.contiguous(memory_format=torch.channels_last)
            a, b = timed_us(t), timed_us(cl)
            gb = t.numel() * t.element_size() / 1e9
            print(f"{str(dtype).split('.')[-1]} {c} {hw} {a:.1f} {b:.1f} {gb / a * 1e6:.0f} {gb / b * 1e6:.0f} {b / a:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
