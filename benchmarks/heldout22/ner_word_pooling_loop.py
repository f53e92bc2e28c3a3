"""Clinical-note NER tagging that pools sub-word vectors into word vectors in a Python loop (launch overhead).

Workload: named-entity tagging of de-identified clinical notes, inference: 16 sentences of up to 256
WordPiece tokens per step ([CLS], 1-3 pieces per word, [SEP], padding) through a 6-layer pre-norm
`nn.TransformerEncoder` of width 768 (12 heads, padding mask, bf16 autocast); each word's vector is the
mean of its pieces' vectors, then a linear layer gives 9 BIO tags per word (~2,000 words per step).

Cause (baseline): the word vectors are gathered the way the tokenizer's `word_ids()` invite, a loop
over sentences and words, `h[b, start:end].mean(0)`, then `torch.stack`: one small mean kernel per word,
~2,000 launches and their Python per step, against a forward of ~1 ms on the GPU. The GPU waits for
the host.

Fix (`--variant index_add_pooling`): one segment reduction over the whole batch: the pieces' vectors
summed into their words with `index_add_` on a flat word index (built with the batch, like the spans),
divided by the pieces per word (the `scatter_mean` of torch_scatter / PyG): a handful of kernels.
The same means; the atomic float32 sums of `index_add_` add in another order than `mean`, so the
logits may differ in the last bits (the tags should not).
"""

import numpy as np
import torch
from _common import CUDA, DEVICE, StepTimer, bf16, encoder, options
from torch import nn

VARIANTS = ("index_add_pooling",)
DIM, HEADS, LAYERS, SENTENCES, SEQ, VOCAB = (768, 12, 6, 16, 256, 28996) if CUDA else (32, 4, 1, 3, 24, 300)
TAGS, POOL = 9, 4


def make_batch(rng: np.random.Generator) -> dict[str, object]:
    """Token ids, padding mask, per-sentence word spans (from word_ids) and the flat word index."""
    tokens = np.zeros((SENTENCES, SEQ), dtype=np.int64)
    spans: list[list[tuple[int, int]]] = []
    word_of = np.full((SENTENCES, SEQ), -1, dtype=np.int64)  # -1: [CLS], [SEP], padding
    words = 0
    for b in range(SENTENCES):
        budget = int(rng.integers(SEQ // 2, SEQ - 1))  # pieces available for words in this sentence
        pos, sent = 1, []
        while True:
            n = int(rng.choice([1, 2, 3], p=[0.6, 0.3, 0.1]))
            if pos + n > budget:
                break
            sent.append((pos, pos + n))
            word_of[b, pos:pos + n] = words
            words += 1
            pos += n
        tokens[b, 0], tokens[b, 1:pos], tokens[b, pos] = 101, rng.integers(103, VOCAB, pos - 1), 102
        spans.append(sent)
    flat = word_of.reshape(-1)
    where = np.nonzero(flat >= 0)[0]
    return {
        "tokens": torch.from_numpy(tokens).to(DEVICE),
        "spans": spans,
        "positions": torch.from_numpy(where).to(DEVICE),
        "word_index": torch.from_numpy(flat[where]).to(DEVICE),
        "pieces": torch.from_numpy(np.bincount(flat[where], minlength=words)).to(DEVICE),
        "words": words,
    }


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    segment = args.variant == "index_add_pooling"
    torch.manual_seed(0)
    body, head, _ = encoder(DIM, HEADS, LAYERS, TAGS)
    with torch.device(DEVICE):
        embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        pos = torch.randn(1, SEQ, DIM) * 0.02
    body.eval()
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(POOL)]
    tag_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    logit_sum = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    with torch.no_grad():
        for i in range(args.steps):
            timer.tick()
            batch = batches[i % POOL]
            tokens = batch["tokens"]
            assert isinstance(tokens, torch.Tensor)
            with bf16():
                h = body(embed(tokens) + pos, src_key_padding_mask=tokens == 0).float()
            if segment:
                flat = h.reshape(-1, DIM)[batch["positions"]]
                sums = torch.zeros(batch["words"], DIM, device=DEVICE).index_add_(0, batch["word_index"], flat)
                word_vecs = sums / batch["pieces"][:, None]
            else:
                vecs = []
                for b, sent in enumerate(batch["spans"]):  # type: ignore[arg-type]
                    for start, end in sent:
                        vecs.append(h[b, start:end].mean(0))
                word_vecs = torch.stack(vecs)
            with bf16():
                logits = head(word_vecs).float()
            tag_sum += logits.argmax(-1).sum()
            logit_sum += logits.sum()
            timer.end()
    timer.report(f"ner_word_pooling_loop variant={args.variant or 'baseline'} "
                 f"tag sum {tag_sum.item():.0f} logit sum {logit_sum.item():.3f}")


if __name__ == "__main__":
    main()
