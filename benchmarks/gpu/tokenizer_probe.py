"""Where the profiled tokenizer's time goes (run on a GPU machine from the repository root: OUT=DIR python3 benchmarks/gpu/tokenizer_probe.py): train_tokenize's step (MLP fwd/bwd/AdamW at hidden 1024,
then tokenize 4000 strings) timed piecewise with perf_counter, bare and under torch.profiler
(CPU+CUDA, record_shapes), alternating; also the tokenizer alone under the profiler with no GPU work."""
import gc
import json
import os
import statistics as st
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "sample_traces/scripts")
import train_tokenize as tt

dev = "cuda"
vocab, seq, dim, hidden, layers, n = 32768, 16, 512, 1024, 6, 4000  # train_tokenize.py --hidden 1024
model = tt.Model(vocab, dim, hidden, layers).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

def step(i, res):
    t0 = time.perf_counter()
    ids, labels = tt.tokenize(tt.texts(i, n), vocab, seq)
    t1 = time.perf_counter()
    ids, labels = ids.to(dev), labels.to(dev)
    loss = torch.nn.functional.cross_entropy(model(ids), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    t2 = time.perf_counter()
    res["tok"].append(t1 - t0)
    res["launch"].append(t2 - t1)

out = {}
for _ in range(3):
    for mode in ("bare", "prof", "prof_gc_off"):
        res = {"tok": [], "launch": []}
        if mode == "prof_gc_off":
            gc.disable()
        if mode == "bare":
            for i in range(8):
                step(i, res)
        else:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
                for i in range(8):
                    step(i, res)
        gc.enable()
        torch.cuda.synchronize()
        o = out.setdefault(mode, {"tok": [], "launch": []})
        o["tok"] += res["tok"][2:]
        o["launch"] += res["launch"][2:]
# tokenizer alone
for mode in ("alone_bare", "alone_prof"):
    ts = []
    for i in range(6):
        if mode == "alone_bare":
            t0 = time.perf_counter()
            tt.tokenize(tt.texts(i, n), vocab, seq)
            ts.append(time.perf_counter() - t0)
        else:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
                t0 = time.perf_counter()
            tt.tokenize(tt.texts(i, n), vocab, seq)
            ts.append(time.perf_counter() - t0)
    out[mode] = {"tok": ts}
for k, v in out.items():
    print(k, " ".join(f"{kk}={1e3*st.median(vv):.2f}ms" for kk, vv in v.items()))
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "tok_probe.json"), "w") as fh:
    json.dump(out, fh)
