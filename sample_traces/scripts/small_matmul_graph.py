"""small_matmul_loop.py's 256-matmul loop captured once into a CUDA graph and replayed: one launch per step.

Run: tracekit profile sample_traces/scripts/small_matmul_graph.py -o sample_traces/small_matmul_graph.trace.json.gz
The "after" of the CUDA-graph rule. Without CUDA (a CPU test run) it runs the loop eagerly.
"""

import torch
from small_matmul_loop import build
from small_matmul_loop import step as loop

try:  # marks ProfilerStep#N boundaries when run under `tracekit profile`
    from tracekit.profile import step as mark_step
except ImportError:

    def mark_step() -> None:
        """No-op without tracekit."""


def capture(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> "torch.cuda.CUDAGraph":
    """Record the loop's 256 kernels once; replay() relaunches them all with one cudaGraphLaunch."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as CUDA graph capture requires
        for _ in range(3):
            loop(a, b, c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loop(a, b, c)
    return graph


def main() -> None:
    if not torch.cuda.is_available():
        a, b, c = build("cpu")
        for _ in range(5):
            loop(a, b, c)
            mark_step()
        return
    a, b, c = build("cuda")
    graph = capture(a, b, c)
    graph.replay()  # warm-up: first replay uploads the graph
    torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup + warm-up): record with --warmup 1 to leave it out
    for _ in range(5):
        graph.replay()
        mark_step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
