"""How steady the GPU machine's CPU is (run there from the repository root: OUT=DIR python3
benchmarks/gpu/cpu_noise.py): train_tokenize's plain-Python tokenizer timed 40 times in a row, then
the same with the process pinned to one core, then bare and profiled (torch.profiler with tracekit's
settings: CPU + CUDA, record_shapes) alternating per round with the MLP step queued on the GPU, pinned;
the CPU's clock (/proc/cpuinfo) and load sampled between blocks. Writes cpu_noise.json."""
import json
import os
import statistics as st
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "sample_traces/scripts")
import train_tokenize as tt

vocab, seq, dim, hidden, layers, n = 32768, 16, 512, 1024, 6, 4000


def mhz() -> list[float]:
    try:
        with open("/proc/cpuinfo") as fh:
            return [float(line.split(":")[1]) for line in fh if line.startswith("cpu MHz")]
    except OSError:
        return []


def tok_series(k: int) -> list[float]:
    out = []
    for i in range(k):
        t0 = time.perf_counter()
        tt.tokenize(tt.texts(i % 8, n), vocab, seq)
        out.append(round((time.perf_counter() - t0) * 1e3, 2))
    return out


res: dict = {"affinity0": sorted(os.sched_getaffinity(0)), "loadavg0": os.getloadavg(), "mhz0": mhz()}
res["free"] = tok_series(40)
res["mhz1"] = mhz()
core = sorted(os.sched_getaffinity(0))[-2]
os.sched_setaffinity(0, {core})
res["pinned_core"] = core
res["pinned"] = tok_series(40)
res["mhz2"] = mhz()
model = tt.Model(vocab, dim, hidden, layers).to("cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)


def step(i: int, rec: dict) -> None:
    t0 = time.perf_counter()
    ids, labels = tt.tokenize(tt.texts(i, n), vocab, seq)
    t1 = time.perf_counter()
    ids, labels = ids.to("cuda"), labels.to("cuda")
    loss = torch.nn.functional.cross_entropy(model(ids), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    rec["tok"].append(round((t1 - t0) * 1e3, 2))
    rec["launch"].append(round((time.perf_counter() - t1) * 1e3, 2))


def steps(rec: dict) -> None:
    for i in range(8):
        step(i, rec)


def profiled(rec: dict) -> None:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
        steps(rec)


RUN = {"bare": steps, "prof": profiled}
rounds = []
for r in range(6):  # ABBA: bare first in even rounds, profiled first in odd ones
    for mode in ("bare", "prof") if r % 2 == 0 else ("prof", "bare"):
        rec: dict = {"mode": mode, "tok": [], "launch": []}
        RUN[mode](rec)
        torch.cuda.synchronize()
        rounds.append(rec)
res["rounds"] = rounds
res["mhz3"] = mhz()
res["loadavg1"] = os.getloadavg()
for mode in ("bare", "prof"):
    toks = [t for rec in rounds if rec["mode"] == mode for t in rec["tok"][2:]]
    lau = [t for rec in rounds if rec["mode"] == mode for t in rec["launch"][2:]]
    print(mode, f"tok median {st.median(toks):.2f} ms  launch median {st.median(lau):.2f} ms")
print("free", res["free"])
print("pinned", res["pinned"])
for rec in rounds:
    print(rec["mode"], rec["tok"], rec["launch"])
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
with open(os.path.join(os.environ.get("OUT", "/tmp"), "cpu_noise.json"), "w") as fh:
    json.dump(res, fh)
