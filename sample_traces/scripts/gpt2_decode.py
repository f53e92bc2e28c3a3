"""Greedy decode of 20 tokens with a GPT-2-small-shaped transformers model (random weights, no download).

Run: tracekit profile sample_traces/scripts/gpt2_decode.py -o sample_traces/gpt2_decode.trace.json.gz
GPT2Config() defaults: 12 layers, 768 wide, 12 heads, 50257-token vocabulary, fp32, SDPA attention.
Batch 1, a 32-token random prompt (ProfilerStep#1), then 20 eager decode steps, one token each
(ProfilerStep#2..#21), with a StaticCache so that gpt2_decode_graph.py can replay exactly this step from a CUDA graph.
Each token launches a few hundred small kernels (GEMV-shaped linears, layer norms, adds): launch-bound.
"""

import argparse
from dataclasses import dataclass

import torch
from transformers import GPT2Config, GPT2LMHeadModel, StaticCache

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""

PROMPT, NEW_TOKENS = 32, 20


@dataclass
class Decoder:
    model: GPT2LMHeadModel
    cache: StaticCache
    prompt: torch.Tensor  # (1, PROMPT) token ids
    token: torch.Tensor  # (1, 1) the last token: a fixed buffer, so a CUDA graph can read it


def build(device: str, max_new_tokens: int = NEW_TOKENS) -> Decoder:
    torch.manual_seed(0)
    config = GPT2Config()
    if device != "cuda":  # a smaller stack keeps CPU test runs short
        config = GPT2Config(n_layer=2)
    model = GPT2LMHeadModel(config).to(device).eval()
    cache = StaticCache(config=config, max_cache_len=PROMPT + max_new_tokens + 1)
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT), device=device)
    token = torch.zeros(1, 1, dtype=torch.long, device=device)
    return Decoder(model, cache, prompt, token)


@torch.no_grad()
def prefill(d: Decoder) -> None:
    """Empty the cache, run the prompt, and put its greedy next token in d.token."""
    d.cache.reset()
    logits = d.model(input_ids=d.prompt, past_key_values=d.cache, use_cache=True).logits
    d.token.copy_(logits[:, -1].argmax(-1, keepdim=True))


@torch.no_grad()
def decode_step(d: Decoder) -> None:
    """One token: positions come from the cache's own on-device length, so the step is graph-safe."""
    logits = d.model(input_ids=d.token, past_key_values=d.cache, use_cache=True).logits
    d.token.copy_(logits[:, -1].argmax(-1, keepdim=True))


def generate(d: Decoder, n: int = NEW_TOKENS, step=decode_step, mark=mark_step) -> list[int]:
    """Greedy-decode n tokens after the prompt. mark() ends one step for the prefill, then one per token."""
    prefill(d)
    mark()
    tokens = []
    for _ in range(n):
        step(d)
        tokens.append(d.token.clone())  # kept on the device: no host sync per token
        mark()
    return torch.cat(tokens, dim=1)[0].tolist()


def new_tokens() -> int:
    """--new-tokens N (default 20): fewer tokens give a smaller trace."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS)
    return parser.parse_args().new_tokens


def main() -> None:
    n = new_tokens()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    d = build(device, n)
    # warm-up decode (cuBLAS handles, SDPA dispatch), outside the recorded steps: use the model eagerly
    prefill(d)
    for _ in range(3):
        decode_step(d)
    if device == "cuda":
        torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    tokens = generate(d, n)  # ProfilerStep#1 = prefill, #2..#21 = one generated token each
    print("generated:", tokens)


if __name__ == "__main__":
    main()
