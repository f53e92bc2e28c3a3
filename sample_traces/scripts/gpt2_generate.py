"""`model.generate` of 20 new tokens, greedy, GPT-2-small-shaped transformers model with random weights.

Run: tracekit profile sample_traces/scripts/gpt2_generate.py -o sample_traces/gpt2_generate.trace.json.gz
The seeds' scenario as a user writes it: the default DynamicCache, generate()'s own loop with its host
syncs (stopping criteria). One warm-up generate, then one recorded generate (one ProfilerStep).
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=20)
    n = parser.parse_args().new_tokens
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = GPT2Config() if device == "cuda" else GPT2Config(n_layer=2)
    model = GPT2LMHeadModel(config).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 32), device=device)
    kwargs = dict(
        attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
        do_sample=False, pad_token_id=config.eos_token_id,
    )
    with torch.no_grad():
        model.generate(prompt, **kwargs)  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
        mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
        out = model.generate(prompt, **kwargs)
        mark_step()
    print("generated:", out[0, prompt.shape[1]:].tolist())


if __name__ == "__main__":
    main()
