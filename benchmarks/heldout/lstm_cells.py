"""A two-layer LSTM language model written as nn.LSTMCell modules stepped in a Python loop over time.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/lstm_cells.py
Fixes: --fix cudnn (the same weights in one nn.LSTM: cuDNN runs the whole sequence), --fix cudnn_amp
(that, under bf16 autocast: the head runs in bf16, and cuDNN's LSTM in fp16, the dtype autocast
always gives _cudnn_rnn). On the GPU: sequence 64, batch 32, hidden 1024, vocab 8192, Adam.
Steps are marked by tracekit's optimizer.step() hook; at the end it prints the mean step time
measured without the profiler.
"""

import contextlib

import torch
import torch.nn.functional as F
from _common import CUDA, DEVICE, options, train
from torch import nn


class CellLM(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, fused: bool) -> None:
        super().__init__()
        self.fused, self.hidden = fused, hidden
        self.embed = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList([nn.LSTMCell(hidden, hidden) for _ in range(layers)])
        self.head = nn.Linear(hidden, vocab)
        self.lstm = nn.LSTM(hidden, hidden, layers, batch_first=True) if fused else None
        if self.lstm is not None:  # the same weights as the cells
            with torch.no_grad():
                for i, cell in enumerate(self.cells):
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                        getattr(self.lstm, f"{name}_l{i}").copy_(getattr(cell, name))
            self.cells = nn.ModuleList()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.lstm is not None:
            return self.head(self.lstm(x)[0])
        for cell in self.cells:
            h = c = x.new_zeros(x.shape[0], self.hidden)
            outs = []
            for t in range(x.shape[1]):
                h, c = cell(x[:, t], (h, c))
                outs.append(h)
            x = torch.stack(outs, 1)
        return self.head(x)


def main() -> None:
    args = options(__doc__, ("cudnn", "cudnn_amp")).parse_args()
    seq, batch, hidden, vocab = (64, 32, 1024, 8192) if CUDA else (8, 2, 32, 64)
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq + 1), device=DEVICE)
    model = CellLM(vocab, hidden, 2, args.fix is not None).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    def loss_of(i: int) -> torch.Tensor:
        ctx = torch.autocast(DEVICE, torch.bfloat16) if args.fix == "cudnn_amp" else contextlib.nullcontext()
        with ctx:
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        return loss

    timer, loss = train(opt, args.steps, loss_of)
    timer.report(f"lstm_cells fix={args.fix or 'none'} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
