"""Text classifier trained on batches padded to the tokenizer's max_length (1024) while most sequences are a few hundred tokens.

64 sequences per step, lengths drawn from an exponential of mean 160 clipped to [16, 1024]; a 6-layer
pre-norm `nn.TransformerEncoder` (width 768, 12 heads) with a key-padding mask, mean-pooled over the
real tokens, 10 classes, bf16 autocast, fused AdamW. Variants: `pad_longest` (each batch padded to
its own longest sequence), `sorted_chunks` (the batch sorted by length and run as 4 chunks of 16,
each padded to its own longest; the chunks' summed losses back-propagated once).
"""

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, adamw, encoder, options, train
from torch import nn

VARIANTS = ("pad_longest", "sorted_chunks")
DIM, HEADS, LAYERS, BATCH, MAX_LEN, MEAN_LEN = (768, 12, 6, 64, 1024, 160) if CUDA else (64, 4, 2, 8, 64, 12)
VOCAB, CLASSES, CHUNKS = 30000, 10, 4


def make_batch(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids padded to MAX_LEN (pad id 0), the lengths, the labels."""
    lengths = (torch.empty(BATCH).exponential_(1.0 / MEAN_LEN, generator=g).long() + 16).clamp(max=MAX_LEN)
    ids = torch.randint(1, VOCAB, (BATCH, MAX_LEN), generator=g)
    ids[torch.arange(MAX_LEN)[None, :] >= lengths[:, None]] = 0
    labels = torch.randint(0, CLASSES, (BATCH,), generator=g)
    return ids.to(DEVICE), lengths.to(DEVICE), labels.to(DEVICE)


def main() -> None:
    args = options(__doc__, VARIANTS).parse_args()
    torch.manual_seed(0)
    body, head, params = encoder(DIM, HEADS, LAYERS, CLASSES)
    tok, pos = nn.Embedding(VOCAB, DIM).to(DEVICE), nn.Embedding(MAX_LEN, DIM).to(DEVICE)
    params += [*tok.parameters(), *pos.parameters()]
    opt = adamw(params)
    g = torch.Generator().manual_seed(1)
    batches = [make_batch(g) for _ in range(4)]
    host_lengths = [b[1].tolist() for b in batches]  # known on the host, as a tokenizer returns them

    def summed_loss(ids: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor, width: int) -> torch.Tensor:
        ids = ids[:, :width]
        valid = torch.arange(width, device=DEVICE)[None, :] < lengths[:, None]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=CUDA):
            h = body(tok(ids) + pos.weight[:width], src_key_padding_mask=~valid)
            pooled = (h.float() * valid[..., None]).sum(1) / lengths[:, None]
            logits = head(pooled)
        return F.cross_entropy(logits.float(), labels, reduction="sum")

    def loss_of(i: int) -> torch.Tensor:
        ids, lengths, labels = batches[i % 4]
        lens = host_lengths[i % 4]
        if args.variant == "sorted_chunks":
            order = sorted(range(BATCH), key=lambda k: lens[k])
            size = BATCH // CHUNKS
            total = torch.zeros((), device=DEVICE)
            for c in range(CHUNKS):
                part = order[c * size:(c + 1) * size]
                idx = torch.tensor(part, device=DEVICE)
                total = total + summed_loss(ids[idx], lengths[idx], labels[idx], max(lens[k] for k in part))
            return total / BATCH
        width = max(lens) if args.variant == "pad_longest" else MAX_LEN
        return summed_loss(ids, lengths, labels, width) / BATCH

    train("pad_max_length", args.variant, args.steps, opt, loss_of)


if __name__ == "__main__":
    main()
