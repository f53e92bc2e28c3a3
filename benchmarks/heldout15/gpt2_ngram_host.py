"""Greedy generation with `no_repeat_ngram_size=3` whose n-gram ban is computed in Python on the step's thread.

Workload: continuing 16 stories with a GPT-2-medium-shaped decoder (learned positions, 24 pre-norm
layers of width 1024, 16 heads of 64, tanh-GELU MLP 4096, tied 50,304-token head; 355M weights,
bf16, inference mode): a 256-token prompt per story, prefilled once into a K/V cache, then 4 greedy
tokens per step with a 3-gram repetition ban, the setting of Hugging Face's "How to generate text"
post. The ban is Hugging Face's `NoRepeatNGramLogitsProcessor` as transformers 4.x implements it
(fairseq's Python fallback is the same): for every hypothesis, `input_ids[i].tolist()`, a Python
dict from every (n-1)-gram of the prompt and the generated tokens to the tokens that followed it
(~4,800 tuple and list operations per token for the 16 stories), another `.tolist()` of the current
(n-1)-gram, and `scores[i, banned] = -inf` from a Python list: 32 device-to-host reads (the first
waits for the step's forward) and 16 small uploads and index kernels per token.

Variant `gpu_ngram`: the same ban as tensor operations (what transformers 5 does): every window of
3 tokens (`unfold`), a match of its first two against the current 2-gram, the matching windows'
third tokens scattered into a boolean mask, `masked_fill(-inf)`: no host round trip; the same tokens.

No extra variant (the baseline reads the tokens on the host every token).
"""

import math

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, options
from torch import nn

if CUDA:
    DIM, HEADS, LAYERS, VOCAB, BATCH, PROMPT, TOKENS = 1024, 16, 24, 50304, 16, 256, 4
else:
    DIM, HEADS, LAYERS, VOCAB, BATCH, PROMPT, TOKENS = 64, 4, 2, 256, 2, 16, 4
NGRAM = 3
HEAD_DIM = DIM // HEADS
MAX_LEN = PROMPT + 16 * TOKENS
DTYPE = torch.bfloat16 if CUDA else torch.float32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.c_attn, self.c_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.c_fc, self.mlp_proj = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor, pos: int, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        k_cache[:, :, pos:pos + t] = k
        v_cache[:, :, pos:pos + t] = v
        a = F.scaled_dot_product_attention(q, k_cache[:, :, :pos + t], v_cache[:, :, :pos + t], is_causal=t > 1)
        x = x + self.c_proj(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(1024, DIM)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)

    def forward(self, ids: torch.Tensor, pos: int, caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """ids (B, T) at positions pos .. pos + T - 1 -> float32 logits of the last position."""
        x = self.wte(ids) + self.wpe(torch.arange(pos, pos + ids.shape[1], device=ids.device))
        for block, (kc, vc) in zip(self.h, caches, strict=True):
            x = block(x, pos, kc, vc)
        return (self.ln_f(x[:, -1]) @ self.wte.weight.T).float()


def _get_ngrams(ngram_size: int, prev_input_ids: torch.Tensor, num_hypos: int) -> list[dict[tuple[int, ...], list[int]]]:
    """transformers 4.x `_get_ngrams`: every (n-1)-gram of each hypothesis -> the tokens that followed it."""
    generated_ngrams: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(num_hypos)]
    for idx in range(num_hypos):
        gen_tokens = prev_input_ids[idx].tolist()
        generated_ngram = generated_ngrams[idx]
        for ngram in zip(*[gen_tokens[i:] for i in range(ngram_size)], strict=False):
            prev_ngram_tuple = tuple(ngram[:-1])
            generated_ngram[prev_ngram_tuple] = generated_ngram.get(prev_ngram_tuple, []) + [ngram[-1]]  # noqa: RUF005 (as written there)
    return generated_ngrams


def no_repeat_ngram_python(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """transformers 4.x `NoRepeatNGramLogitsProcessor.__call__` (with `_calc_banned_ngram_tokens`)."""
    num_hypos, cur_len = scores.shape[0], input_ids.shape[-1]
    if cur_len + 1 < NGRAM:
        return scores
    generated_ngrams = _get_ngrams(NGRAM, input_ids, num_hypos)
    start_idx = cur_len + 1 - NGRAM
    banned_batch_tokens = [generated_ngrams[i].get(tuple(input_ids[i, start_idx:cur_len].tolist()), [])
                           for i in range(num_hypos)]
    for i, banned_tokens in enumerate(banned_batch_tokens):
        scores[i, banned_tokens] = -float("inf")
    return scores


def no_repeat_ngram_gpu(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The same ban with tensor ops: windows matching the current (n-1)-gram ban their last token."""
    cur_len = input_ids.shape[-1]
    if cur_len + 1 < NGRAM:
        return scores
    prefix = input_ids[:, cur_len + 1 - NGRAM:]
    windows = input_ids.unfold(dimension=1, size=NGRAM, step=1)
    matches = (windows[..., :-1] == prefix.unsqueeze(1)).all(dim=-1)
    vocab = scores.shape[-1]
    banned = scores.new_zeros((scores.shape[0], vocab + 1), dtype=torch.bool)
    banned.scatter_(1, torch.where(matches, windows[..., -1], vocab), True)  # non-matches to a spare column
    return scores.masked_fill(banned[:, :vocab], -float("inf"))


def main() -> None:
    args = options(__doc__, ("gpu_ngram",)).parse_args()
    ban = no_repeat_ngram_gpu if args.variant == "gpu_ngram" else no_repeat_ngram_python
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = GPT2()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(m.in_features))
    model = model.to(DTYPE).eval()
    assert PROMPT + args.steps * TOKENS <= MAX_LEN
    caches = [(torch.zeros(BATCH, HEADS, MAX_LEN, HEAD_DIM, device=DEVICE, dtype=DTYPE),
               torch.zeros(BATCH, HEADS, MAX_LEN, HEAD_DIM, device=DEVICE, dtype=DTYPE)) for _ in range(LAYERS)]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids = torch.zeros(BATCH, MAX_LEN, dtype=torch.long, device=DEVICE)
    # prompts drawn from a small, skewed "vocabulary in use", so n-grams recur as in text
    weights = torch.rand(VOCAB, device=DEVICE, generator=gen) ** 8
    ids[:, :PROMPT] = torch.multinomial(weights, BATCH * PROMPT, replacement=True, generator=gen).view(BATCH, PROMPT)

    with torch.inference_mode():
        logits = model(ids[:, :PROMPT], 0, caches)
        cur = PROMPT
        banned_total = torch.zeros((), dtype=torch.long, device=DEVICE)
        checksum = torch.zeros((), dtype=torch.long, device=DEVICE)
        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            for _ in range(TOKENS):
                scores = ban(ids[:, :cur], logits)
                banned_total += torch.isinf(scores).sum()
                token = scores.argmax(-1)
                ids[:, cur] = token
                logits = model(token[:, None], cur, caches)
                cur += 1
                checksum += token.sum()
            timer.end()
    timer.report(f"gpt2_ngram_host variant={args.variant or 'baseline'} token checksum {checksum.item()} "
                 f"banned {banned_total.item()}")


if __name__ == "__main__":
    main()
