"""Data-parallel training of a small MLP on 2 ranks (DDP), optionally with one rank slowed on purpose.

Run one process per rank with torchrun; each rank writes its own trace ({rank} in -o):

    torchrun --nproc-per-node 2 -m tracekit profile --warmup 2 --no-report --force \
        -o OUT/rank{rank}.trace.json.gz sample_traces/scripts/ddp_train.py [--slow-rank 1]

`--slow-rank R` makes rank R's DataLoader (num_workers=0) spend `--slow-ms` more CPU time on every
batch (a busy loop in its collate function), so rank R arrives late at every gradient all-reduce and
the other ranks wait for it there. No step marks in the script: `tracekit profile` ends each
ProfilerStep at optimizer.step(). On CUDA: NCCL, 8 layers of 2048, batch 1024; without CUDA: gloo,
a tiny model and batch (so tests can run it on a CPU).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import weakref

# NVLink SHARP / multicast stay off (also in every child process: set before torch initialises NCCL)
for _key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(_key, "0" if _key == "NCCL_NVLS_ENABLE" else "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


class RandomBatches(Dataset):
    """`n` batches of random (input, target) pairs, made once on the CPU (cheap to serve)."""

    def __init__(self, n: int, batch: int, width: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.n = n
        self.x = torch.randn(batch, width, generator=g)
        self.y = self.x.flip(1)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x, self.y


class SlowCollate:
    """The batch as it is, plus `extra_s` seconds of CPU work per batch (0: none)."""

    def __init__(self, extra_s: float) -> None:
        self.extra_s = extra_s

    def __call__(self, sample: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.extra_s > 0:
            end = time.perf_counter() + self.extra_s
            acc = 0
            while time.perf_counter() < end:  # CPU-bound, like decoding or augmenting images
                acc += sum(range(200))
        return sample


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12, help="training steps (optimizer.step calls)")
    p.add_argument("--slow-rank", type=int, default=None, help="rank whose DataLoader is slowed")
    p.add_argument("--slow-ms", type=float, default=20.0, help="extra CPU time per batch on --slow-rank")
    p.add_argument("--width", type=int, default=None, help="layer width (default 2048 on CUDA, 64 on CPU)")
    p.add_argument("--batch", type=int, default=None, help="batch per rank (default 1024 on CUDA, 32 on CPU)")
    p.add_argument("--layers", type=int, default=None, help="linear layers (default 8 on CUDA, 3 on CPU)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            **({"device_id": device} if cuda else {}))
    width = args.width or (2048 if cuda else 64)
    batch = args.batch or (1024 if cuda else 32)
    layers = args.layers or (8 if cuda else 3)
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.GELU()]
    model = DistributedDataParallel(nn.Sequential(*blocks).to(device),
                                    device_ids=[local] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    extra = args.slow_ms / 1e3 if args.slow_rank == rank else 0.0
    loader = DataLoader(RandomBatches(args.steps, batch, width, seed=rank), batch_size=None,
                        num_workers=0, collate_fn=SlowCollate(extra))
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = nn.functional.mse_loss(model(x).float(), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradient buckets here: a late rank makes the others wait
        optimizer.step()
    final = loss.item()
    # Free the DDP model (its gradient reducer) while the process group is still registered, so the
    # group's worker threads are joined by destroy_process_group, which releases the GIL: when the
    # reducer held the last reference, freeing it joined them with the GIL held while a gloo worker
    # thread waited for the GIL to free a finished collective (its captured thread-local state holds
    # the Python context torch's backward stashes there). Seen on torch 2.13 CPU in 1 of ~13 runs
    # under `tracekit profile` on 2 busy cores (0 of 80 without the profiler, whose callbacks widen
    # the window); 0 of 80 with this order.
    model_ref = weakref.ref(model)
    del model, optimizer, loss
    gc.collect()
    dist.barrier()
    if rank == 0:
        print(f"ranks {world}, loss {final:.4f}, slowed rank: {args.slow_rank}"
              + ("" if model_ref() is None else " (the DDP model is still referenced)"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
