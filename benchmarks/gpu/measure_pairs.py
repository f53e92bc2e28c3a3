"""Before/after pairs for the suggestion rules (issue 5), timed with CUDA events, no profiler attached.

  python3 benchmarks/gpu/measure_pairs.py OUT.json
Each side runs exactly the step of its sample script in sample_traces/scripts/ (imported, not copied),
so these numbers and the sample traces describe the same work. See timing.bench for what
event_ms_median and wall_ms_per_iter mean.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from timing import DEVICE, Event, bench, synchronize

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sample_traces" / "scripts"))

import attention_naive
import attention_sdpa
import elementwise_compiled
import elementwise_eager
import gpt2_decode
import gpt2_decode_graph
import linear_bf16
import linear_fp32
import small_matmul_bmm
import small_matmul_graph
import small_matmul_loop
import train_optimizer_loop


def small_matmuls() -> dict:
    a, b, c = small_matmul_loop.build(DEVICE)
    replay = small_matmul_graph.capture(a, b, c).replay if DEVICE == "cuda" else lambda: None
    return {
        "loop": bench(lambda: small_matmul_loop.step(a, b, c)),
        "cuda_graph": bench(replay),
        "bmm": bench(lambda: small_matmul_bmm.step(a, b, c)),
    }


def elementwise() -> dict:
    args = elementwise_eager.build(DEVICE)
    return {
        "eager": bench(lambda: elementwise_eager.chain(*args)),
        "compiled": bench(lambda: elementwise_compiled.compiled_chain(*args)),
    }


def linear() -> dict:
    layer, x = linear_fp32.build(DEVICE)
    res = {}
    for name, flag in (("fp32_tf32_off", False), ("tf32", True)):
        torch.backends.cuda.matmul.allow_tf32 = flag
        res[name] = bench(lambda: linear_fp32.step(layer, x), iters=30)
    torch.backends.cuda.matmul.allow_tf32 = False
    layer, x = linear_bf16.build(DEVICE)
    res["bf16"] = bench(lambda: linear_bf16.step(layer, x), iters=30)
    return res


def attention() -> dict:
    q, k, v, causal = attention_naive.build(DEVICE)
    return {
        "naive": bench(lambda: attention_naive.attention(q, k, v, causal), iters=30),
        "sdpa": bench(lambda: attention_sdpa.attention(q, k, v, causal), iters=30),
    }


def optimizer() -> dict:
    """AdamW over train_optimizer_loop.py's 302 tensors: per-tensor loop, foreach, fused. Per side, the
    whole training step and the optimizer step alone (its grads left by the last step)."""
    res = {}
    for name, options in (("loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        model, opt, x, y = train_optimizer_loop.build(DEVICE, **options)
        res[name] = bench(lambda: train_optimizer_loop.step(model, opt, x, y), iters=30)  # noqa: B023
        res[name]["optimizer_step_only"] = bench(opt.step, iters=30)
    return res


def _decode_rounds(d, step, rounds: int = 10) -> dict:
    """Per-token event times and the wall time of the 20 decode steps (prefill not timed)."""
    n = gpt2_decode.NEW_TOKENS
    per_token, totals, events_total, tokens = [], [], [], None
    for _ in range(rounds + 2):  # the first two rounds warm up
        gpt2_decode.prefill(d)
        synchronize()
        starts = [Event(enable_timing=True) for _ in range(n)]
        ends = [Event(enable_timing=True) for _ in range(n)]
        out = []
        t0 = time.perf_counter()
        for i in range(n):
            starts[i].record()
            step(d)
            ends[i].record()
            out.append(d.token.clone())
        synchronize()
        totals.append((time.perf_counter() - t0) * 1e3)
        events_total.append(starts[0].elapsed_time(ends[-1]))
        per_token.extend(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        tokens = torch.cat(out, dim=1)[0].tolist()
    keep = rounds * n
    return {
        "event_ms_per_token_median": statistics.median(per_token[-keep:]),
        "event_ms_20_tokens_median": statistics.median(events_total[2:]),
        "wall_ms_20_tokens_median": statistics.median(totals[2:]),
        "wall_ms_20_tokens_all": totals[2:],
        "tokens": tokens,
    }


def decode() -> dict:
    d = gpt2_decode.build(DEVICE)
    eager = _decode_rounds(d, gpt2_decode.decode_step)
    if DEVICE != "cuda":
        return {"eager": eager}
    graph = gpt2_decode_graph.capture(d)
    replay = _decode_rounds(d, lambda _: graph.replay())
    replay["same_tokens_as_eager"] = replay["tokens"] == eager["tokens"]
    return {"eager": eager, "cuda_graph": replay}


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    res: dict[str, object] = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    only = sys.argv[2:]  # optional: names of the pairs to run
    for name, fn in [
        ("small_matmul", small_matmuls),
        ("elementwise", elementwise),
        ("linear", linear),
        ("attention", attention),
        ("gpt2_decode", decode),
        ("optimizer", optimizer),
    ]:
        if only and name not in only:
            continue
        try:
            res[name] = fn()
        except Exception as exc:  # keep the other pairs' numbers
            res[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(name, json.dumps(_short(res[name])), flush=True)
        if len(sys.argv) > 1:
            Path(sys.argv[1]).write_text(json.dumps(res, indent=1))


def _short(entry: dict) -> dict:
    return {
        k: (
            {m: round(v, 4) for m, v in side.items() if isinstance(v, float)}
            if isinstance(side, dict)
            else side
        )
        for k, side in entry.items()
    }


if __name__ == "__main__":
    main()
