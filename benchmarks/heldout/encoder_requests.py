"""A text classifier (nn.TransformerEncoder, 4 layers, width 512) serving 48 requests of 128 tokens
one at a time, batch 1, under torch.inference_mode.

Run: tracekit profile --warmup 2 --active 4 benchmarks/heldout/encoder_requests.py
Fixes: --fix batched (the 48 requests as one batch of 48), --fix cuda_graphs (the batch-1 forward
captured once in a CUDA graph and replayed per request). One step (tracekit.step()) per round of the
48 requests; at the end it prints the mean step time measured without the profiler and checks that
every variant gives the same classes.
"""

import torch
from _common import CUDA, DEVICE, StepTimer, mark_step, options
from torch import nn

REQUESTS, CLASSES = 48, 8


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(1))


def main() -> None:
    args = options(__doc__, ("batched", "cuda_graphs")).parse_args()
    vocab, dim, heads, layers, seq = (30522, 512, 8, 4, 128) if CUDA else (100, 32, 2, 1, 8)
    if args.fix == "cuda_graphs" and not CUDA:
        print("encoder_requests: --fix cuda_graphs needs CUDA; running the batch-1 loop instead")
    torch.manual_seed(0)
    model = Classifier(vocab, dim, heads, layers).to(DEVICE).eval()
    requests = torch.randint(0, vocab, (REQUESTS, seq), device=DEVICE)
    graph = None
    with torch.inference_mode():
        if args.fix == "cuda_graphs" and CUDA:
            static_in = requests[:1].clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = model(static_in)

        def serve() -> torch.Tensor:
            if args.fix == "batched":
                return model(requests).argmax(1)
            outs = []
            for i in range(REQUESTS):
                if graph is not None:
                    static_in.copy_(requests[i:i + 1])
                    graph.replay()
                    outs.append(static_out.argmax(1))
                else:
                    outs.append(model(requests[i:i + 1]).argmax(1))
            return torch.cat(outs)

        timer = StepTimer()
        for _ in range(args.steps):
            timer.tick()
            classes = serve()
            mark_step()
        timer.report(f"encoder_requests fix={args.fix or 'none'} classes {classes[:8].tolist()}")


if __name__ == "__main__":
    main()
