"""Code snippets of the rules about debugging and tidiness settings left on (anomaly mode, CUDA_LAUNCH_BLOCKING, per-step empty_cache and gc.collect), keyed by rule id."""

from __future__ import annotations

DEBUG_SNIPPETS: dict[str, str] = {
    "anomaly_mode": '''\
# Anomaly detection is a debugging tool: every backward node's outputs are checked for NaN
# (a kernel, a copy to the host and a sync each) and every forward op stores a Python stack.
torch.autograd.set_detect_anomaly(False)        # or delete the set_detect_anomaly(True) call
# still want to catch a NaN loss? check once per step, without a sync, and read it rarely:
bad = torch.zeros((), dtype=torch.bool, device="cuda")
bad |= ~torch.isfinite(loss.detach())           # no .item(): stays on the GPU
if step % 100 == 0 and bad.item():              # one sync per 100 steps
    raise FloatingPointError("non-finite loss")
# hunting one NaN: turn it on around a single step only
with torch.autograd.detect_anomaly():
    loss.backward()
''',
    "launch_blocking": '''\
# CUDA_LAUNCH_BLOCKING=1 is a debugging setting: every kernel launch waits for its kernel to
# finish, so the CPU and the GPU take turns instead of overlapping. Remove it from the script
# (before anything initialises CUDA) and from the shell / launcher / job environment:
import os
os.environ.pop("CUDA_LAUNCH_BLOCKING", None)    # or delete os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
import torch
#   shell:  unset CUDA_LAUNCH_BLOCKING    (check `env | grep CUDA_LAUNCH_BLOCKING`, .bashrc, the
#           Dockerfile's ENV, the SLURM/torchrun launcher, an IDE run configuration)
# Still hunting an asynchronous CUDA error? Set it for that one debugging run only, or use
# TORCH_USE_CUDA_DSA / compute-sanitizer, which find the faulting kernel without slowing every run.
''',
    "empty_cache": '''\
# torch.cuda.empty_cache() hands every cached block back to the driver (cudaFree, which syncs);
# the next step allocates them again (cudaMalloc). Memory it frees is reused by PyTorch anyway.
for batch in loader:
    loss = step(batch)
    del loss                                     # dropping references is enough
    # gc.collect(); torch.cuda.empty_cache()    # <- remove from the loop
# fragmentation OOMs: let the allocator grow segments instead of emptying the cache
#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
# memory for another process: empty the cache once, between phases (after training, before eval)
''',
    "gc_collect": '''\
# Python's collector walks every tracked object; with a model and its tensors that takes
# milliseconds to seconds. Reference counting frees the step's tensors without it.
import gc
# gc.collect()                                   # <- remove the per-step call from the loop
gc.freeze()            # after building the model/optimizer: move them out of the collector's view
gc.set_threshold(50_000, 50, 100)                # fewer automatic collections (defaults 700, 10, 10)
# or collect at a point that does not hold the GPU back (between epochs, at checkpoints)
''',
}
