"""A few training steps of a small causal transformer LM (AdamW, cross entropy, loss.backward()).

Run: tracekit profile sample_traces/scripts/train_transformer.py -o sample_traces/train_transformer.trace.json.gz
No step marks in the script: `tracekit profile` hooks optimizer.step() to end each ProfilerStep.
On the GPU: 4 layers, d_model 1024, 16 heads, sequence 512, batch 16, bf16 autocast. On the CPU a tiny
version (also the source of the CPU-only sample trace).
"""

import torch
import torch.nn.functional as F
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        x = self.embed(tokens) + self.pos(torch.arange(seq, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


def main() -> None:
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    vocab, d_model, heads, layers, seq, batch = (
        (8192, 1024, 16, 4, 512, 16) if cuda else (512, 64, 4, 2, 32, 4)
    )
    torch.manual_seed(0)
    model = TinyLM(vocab, d_model, heads, layers, seq).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inputs, targets = data[:, :-1], data[:, 1:]
    for _ in range(6):  # the first two steps warm up (cuBLAS, autocast caches, AdamW state)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print("loss:", loss.item())


if __name__ == "__main__":
    main()
