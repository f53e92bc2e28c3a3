"""Synthetic CUDA-graph traces for tests: one decode-like step (ops with shapes, the kernels each
launches) written eagerly, as a capture (launch calls, no GPU work) or as graph replays."""

from __future__ import annotations

from dataclasses import dataclass

from tracebuilder import TraceBuilder


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    kind: str = "kernel"  # kernel | memcpy | memset
    dur: float = 10.0


@dataclass(frozen=True)
class Op:
    name: str
    dims: list
    types: list
    launches: tuple[Launch, ...]


def mm(m: int, n: int, k: int, kernel: str = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64",
       split_k: bool = False) -> Op:
    """aten::mm of (m, k) x (k, n) in bf16: FLOPs 2*m*n*k. `split_k` adds cuBLAS's reduce kernel."""
    launches = [Launch(kernel, (max(1, n // 64), max(1, m // 64), 1), dur=40.0)]
    if split_k:
        launches.append(Launch("void cublasLt::splitKreduce_kernel<32, 16, int, float>", (n, 1, 1), dur=4.0))
    return Op("aten::mm", [[m, k], [k, n]], ["c10::BFloat16", "c10::BFloat16"], tuple(launches))


def add(numel: int) -> Op:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>"
    return Op("aten::add", [[numel], [numel]], ["c10::BFloat16", "c10::BFloat16"],
              (Launch(name, (max(1, numel // 512), 1, 1), dur=2.0),))


def copy(numel: int) -> Op:
    return Op("aten::copy_", [[numel], [numel]], ["c10::BFloat16", "c10::BFloat16"],
              (Launch("Memcpy DtoD (Device -> Device)", (0, 0, 0), kind="memcpy", dur=1.0),))


def decode_step(batch: int, hidden: int = 1024, ffn: int = 4096) -> list[Op]:
    """A toy decode step whose GEMMs have M = batch."""
    return [mm(batch, hidden, hidden), add(batch * hidden), mm(batch, ffn, hidden, split_k=True),
            add(batch * ffn), mm(batch, hidden, ffn), copy(batch)]


class GraphTrace(TraceBuilder):
    """A TraceBuilder with a clock: eager steps, captures and replays follow one another."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.t = 0.0

    def _args(self, launch: Launch) -> dict:
        return {"grid": list(launch.grid), "block": [128, 1, 1]} if launch.kind == "kernel" else {"bytes": 256}

    def eager(self, ops: list[Op]) -> None:
        """Run `ops` eagerly: op, launch call, GPU activity."""
        for op in ops:
            n = len(op.launches)
            ext = self.op(op.name, self.t, 5.0 * n + 2, **{"Input Dims": op.dims, "Input type": op.types})
            for j, la in enumerate(op.launches):
                self.launch(self.t + 1 + 5 * j, 4, la.kernel, self.t + 100, la.dur, ext=ext, kind=la.kind,
                            api=_api(la.kind), **self._args(la))
                self.t += 1
            self.t += 5.0 * n + 3

    def capture(self, ops: list[Op], markers: bool = False) -> None:
        """Capture `ops`: the op and its launch calls, no GPU activity."""
        if markers:
            self.launch(self.t, 1, None, 0, 0, api="cudaStreamBeginCapture", kind="kernel")
            self.t += 2
        for op in ops:
            n = len(op.launches)
            ext = self.op(op.name, self.t, 5.0 * n + 2, **{"Input Dims": op.dims, "Input type": op.types})
            for j, la in enumerate(op.launches):
                self.launch(self.t + 1 + 5 * j, 4, None, 0, 0, ext=ext, api=_api(la.kind))
            self.t += 5.0 * n + 3
        if markers:
            self.launch(self.t, 1, None, 0, 0, api="cudaStreamEndCapture", kind="kernel")
            self.t += 2

    def replay(self, ops: list[Op], drop: tuple[int, ...] = (), extra: int = 0) -> int:
        """One cudaGraphLaunch running the kernels of `ops` back to back; `drop` leaves out those
        positions (a launch that made no node), `extra` adds memcpy nodes at the start."""
        corr = self.launch(self.t, 8, None, 0, 0, api="cudaGraphLaunch")
        k = self.t + 10
        for _ in range(extra):
            self.gpu("Memcpy HtoD (Pinned -> Device)", k, 1.0, corr, kind="memcpy", bytes=64)
            k += 2
        flat = [la for op in ops for la in op.launches]
        for i, la in enumerate(flat):
            if i in drop:
                continue
            self.gpu(la.kernel, k, la.dur, corr, kind=la.kind, **self._args(la))
            k += la.dur + 0.5
        self.t = k + 10
        return corr


def _api(kind: str) -> str:
    return {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}[kind]
