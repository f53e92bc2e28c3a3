"""Text classifier fine-tuning whose raw documents are tokenised (pure-Python WordPiece) on the training thread every step.

The corpus is synthetic English-like text (a Zipf-distributed vocabulary of made-up words, capitals
and punctuation), 64 documents of 200-350 words per step. The tokenizer is BERT's algorithm written
in Python: lower-casing, a regex split into words and punctuation, greedy longest-match-first WordPiece
over a 30,522-entry vocabulary, `[CLS] ... [SEP]`, truncation and padding to 256, `torch.tensor` of
the id lists. The model: token + position embeddings, a 6-layer pre-norm `nn.TransformerEncoder`
(width 768, 12 heads) with the key-padding mask, masked mean pool, 4 classes, bf16 autocast, fused
AdamW. Baseline: `batch = tokenize(docs[i * 64:(i + 1) * 64])` in the loop, then `.to(device)`.
Variant `workers`: the same documents in the same order through a `DataLoader` (batch_size 64,
collate_fn = the same tokenize, 8 workers, pin_memory, non-blocking copies).
"""

import random
import re
import unicodedata

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, StepTimer, adamw, bf16, encoder, options
from torch import nn
from torch.utils.data import DataLoader, Dataset

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SPLIT = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def make_corpus(docs: int, words: tuple[int, int], seed: int = 0) -> tuple[list[str], list[str], list[int]]:
    """Synthetic documents, the subword pieces their words are built from, and one label per document."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
              "br", "ch", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"]
    vowels, codas = ["a", "e", "i", "o", "u", "ai", "ea", "ou"], ["", "n", "r", "s", "t", "l", "nd", "st", "ng"]
    syllables = sorted({o + v + c for o in onsets for v in vowels for c in codas})
    lexicon = ["".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))) for _ in range(40000)]
    cum, acc = [], 0.0
    for r in range(len(lexicon)):
        acc += 1.0 / (r + 10)
        cum.append(acc)
    texts, labels = [], []
    for _ in range(docs):
        n = rng.randint(*words)
        out = []
        for j, w in enumerate(rng.choices(lexicon, cum_weights=cum, k=n)):
            out.append(w.capitalize() if j == 0 or out[-1].endswith(".") else w)
            r = rng.random()
            if r < 0.06:
                out[-1] += "."
            elif r < 0.1:
                out[-1] += ","
        texts.append(" ".join(out))
        labels.append(rng.randrange(4))
    return texts, syllables + lexicon[:20000], labels


class WordPiece:
    """BERT's basic + WordPiece tokenizer in plain Python."""

    def __init__(self, pieces: list[str], size: int, max_len: int) -> None:
        vocab = list(SPECIAL) + sorted(set("abcdefghijklmnopqrstuvwxyz.,")) + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
        seen = set(vocab)
        for p in pieces:
            for tok in (p, f"##{p}"):
                if len(vocab) < size and tok not in seen:
                    vocab.append(tok)
                    seen.add(tok)
        self.vocab = {t: i for i, t in enumerate(vocab)}
        self.max_len = max_len

    def words(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        return SPLIT.findall("".join(c for c in text if unicodedata.category(c) != "Mn"))

    def wordpiece(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.vocab["[UNK]"]]
        ids, start = [], 0
        while start < len(word):
            end, cur = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.vocab:
                    cur = self.vocab[sub]
                    break
                end -= 1
            if cur is None:
                return [self.vocab["[UNK]"]]
            ids.append(cur)
            start = end
        return ids

    def __call__(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids and the padding mask (True = padding), both (len(texts), max_len)."""
        rows = []
        for text in texts:
            ids = [self.vocab["[CLS]"]]
            for w in self.words(text):
                ids.extend(self.wordpiece(w))
            ids = [*ids[: self.max_len - 1], self.vocab["[SEP]"]]
            rows.append(ids + [0] * (self.max_len - len(ids)))
        ids_t = torch.tensor(rows, dtype=torch.long)
        return ids_t, ids_t == 0


class Docs(Dataset):
    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> str:
        return self.texts[i]


class Classifier(nn.Module):
    def __init__(self, vocab: int, max_len: int, dim: int, heads: int, layers: int, classes: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.body, self.head, _ = encoder(dim, heads, layers, classes)
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.body(self.tok(ids) + self.pos, src_key_padding_mask=pad))
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


def main() -> None:
    args = options(__doc__, ("workers",)).parse_args()
    batch, max_len, words, dim, heads, layers, workers = (64, 256, (200, 350), 768, 12, 6, 8) if CUDA else (4, 32, (10, 30), 32, 4, 2, 2)
    texts, pieces, labels_list = make_corpus(batch * args.steps, words)
    tokenize = WordPiece(pieces, 30522, max_len)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Classifier(30522, max_len, dim, heads, layers, 4)
    model = model.to(DEVICE)
    labels = torch.tensor(labels_list, device=DEVICE).view(args.steps, batch)
    opt = adamw(list(model.parameters()))
    loader = iter(DataLoader(Docs(texts), batch_size=batch, shuffle=False, collate_fn=tokenize, num_workers=workers,
                             pin_memory=CUDA)) if args.variant == "workers" else None
    total = torch.zeros((), device=DEVICE, dtype=torch.float64)
    timer = StepTimer()
    for i in range(args.steps):
        timer.tick()
        ids, pad = next(loader) if loader is not None else tokenize(texts[i * batch:(i + 1) * batch])
        ids, pad = ids.to(DEVICE, non_blocking=True), pad.to(DEVICE, non_blocking=True)
        with bf16():
            loss = F.cross_entropy(model(ids, pad).float(), labels[i])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach()
        timer.end()
    timer.report(f"tokenize_loop variant={args.variant or 'baseline'} mean loss {total.item() / args.steps:.5f}")


if __name__ == "__main__":
    main()
