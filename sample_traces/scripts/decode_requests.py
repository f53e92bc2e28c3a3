"""Four `model.generate` requests served one by one, or as one batched call, with a GPT-2-shaped
transformers model (2 layers, 768 wide, random weights, no download).

Run: tracekit profile --warmup 1 --active 2 sample_traces/scripts/decode_requests.py             (4 calls of batch 1)
     tracekit profile --warmup 1 --active 2 sample_traces/scripts/decode_requests.py --batched   (1 call of batch 4)
The pair of the batch_decode rule: each request is a 32-token random prompt and 6 greedy new tokens
(min_new_tokens = max_new_tokens, so every request runs the same tokens), fp32, the default
DynamicCache. One step (tracekit.step()) per round of the four requests, 3 rounds after one warm-up
round. One by one, every token of every request pays generate()'s host work and a few hundred
launches; batched, the four requests share them. The same 2-layer model runs on the CPU without CUDA.
"""

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""

REQUESTS, PROMPT = 4, 32


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batched", action="store_true", help="one generate call for the four requests")
    p.add_argument("--new-tokens", type=int, default=6)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2)
    model = GPT2LMHeadModel(config).to(device).eval()
    prompts = torch.randint(0, config.vocab_size, (REQUESTS, PROMPT), device=device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                  pad_token_id=config.eos_token_id)

    def serve() -> list[list[int]]:
        if args.batched:
            out = model.generate(prompts, attention_mask=torch.ones_like(prompts), **kwargs)
            return out[:, PROMPT:].tolist()
        return [model.generate(prompts[i:i + 1], attention_mask=torch.ones_like(prompts[i:i + 1]),
                               **kwargs)[0, PROMPT:].tolist() for i in range(REQUESTS)]

    with torch.no_grad():
        first = serve()  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
        mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
        times = []
        for _ in range(args.rounds):
            times.append(time.perf_counter())
            out = serve()
            mark_step()
        end = time.perf_counter()
    assert out == first, "greedy decode changed between rounds"
    steady = [*times[1:], end]
    per = (steady[-1] - steady[0]) / (len(steady) - 1)
    kind = "one batched call" if args.batched else f"{REQUESTS} calls one by one"
    print(f"{kind}: mean step time over steps 1..{args.rounds - 1}: {per * 1e3:.3f} ms; first request {out[0][:6]}")


if __name__ == "__main__":
    main()
