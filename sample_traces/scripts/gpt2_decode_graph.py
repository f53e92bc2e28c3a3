"""gpt2_decode.py's decode step captured once into a CUDA graph, then replayed for each of the 20 tokens.

Run: tracekit profile sample_traces/scripts/gpt2_decode_graph.py -o sample_traces/gpt2_decode_graph.trace.json.gz
Same model, prompt and StaticCache as gpt2_decode.py. The step reads its input token from a fixed buffer
and its position from the cache's on-device length, so one graph serves every token: each token costs
one cudaGraphLaunch instead of a few hundred kernel launches. The script checks that the graph
produces the same tokens as eager decode. Without CUDA (a CPU test run) it decodes eagerly.
"""

import torch
from gpt2_decode import Decoder, build, decode_step, generate, mark_step, new_tokens, prefill


def capture(d: Decoder) -> "torch.cuda.CUDAGraph":
    """Record one decode step. Capture only records kernels: the cache does not advance."""
    prefill(d)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as CUDA graph capture requires
        for _ in range(3):
            decode_step(d)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decode_step(d)
    return graph


def main() -> None:
    n = new_tokens()
    if not torch.cuda.is_available():
        print("generated:", generate(build("cpu", n), n))
        return
    d = build("cuda", n)
    eager = generate(d, n, mark=lambda: None)  # reference tokens (eager), also the warm-up
    graph = capture(d)
    torch.cuda.synchronize()  # warm-up kernels finish inside ProfilerStep#0
    mark_step()  # ends ProfilerStep#0 (setup, eager reference, capture): record with --warmup 1
    replay = generate(d, n, step=lambda _: graph.replay())  # #1 prefill, #2..#21 tokens
    assert replay == eager, f"graph replay differs from eager decode: {replay} vs {eager}"
    print("generated:", replay)


if __name__ == "__main__":
    main()
