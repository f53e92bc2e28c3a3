"""Suggestion rules avoid_sync, pinned_memory, dataloader_workers and overlap_comm on synthetic traces."""

from __future__ import annotations

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.detectors import hostside as H
from tracekit.suggestions import rules_host
from tracekit.suggestions.rules import RULES_BY_ID

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _analysis(path):
    return analyze(tracekit.load_trace(path))


def sync_loop_trace(tmp_path, iterations: int = 10, item_every: int = 1):
    """A loop: add kernel (20 µs), then `.item()` (DtoH copy + cudaStreamSynchronize waiting 16 µs);
    the next iteration's kernel starts 77 µs after the sync returns. A final kernel ends the step."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 100 * iterations + 50)
    for i in range(iterations):
        t0 = 100 * i
        add = b.op("aten::add", t0, 8)
        b.launch(t0 + 1, 5, ADD, t0 + 7, 20, ext=add)
        if i % item_every == item_every - 1:
            b.op("aten::item", t0 + 8, 25)
            dense = b.op("aten::_local_scalar_dense", t0 + 9, 23)
            b.launch(t0 + 10, 4, "Memcpy DtoH (Device -> Pageable)", t0 + 27, 2, ext=dense,
                     api="cudaMemcpyAsync", kind="memcpy", bytes=4)
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
                   "tid": b.tid, "ts": t0 + 14, "dur": 16, "args": {"correlation": 99000 + i}})
    b.launch(100 * iterations, 5, ADD, 100 * iterations + 7, 20)
    return b.write(tmp_path / "sync.json")


def test_avoid_sync_fires_on_item_in_loop(tmp_path):
    a = _analysis(sync_loop_trace(tmp_path))
    s = RULES_BY_ID["avoid_sync"].run(a)  # the check, with its row's snippet
    # each sync: CPU waits 16 µs (14 -> 30), the GPU then idles 30 -> 107 (77 µs): min = 16
    assert s.saving_us == pytest.approx(10 * 16.0)
    row = s.evidence[0]
    assert (row["origin"], row["api"], row["calls"], row["per_step"]) == ("aten::item", "cudaStreamSynchronize", 10, 10)
    assert row["bubble_us"] == pytest.approx(10 * 77.0) and row["wait_us"] == pytest.approx(160.0)
    assert ".item()" in row["what"] and "loss.item()" in s.snippet


def test_avoid_sync_fires_on_one_stalling_sync_per_step(tmp_path):
    """One .item() in the step still stalls it: CPU waits 16 µs, then the GPU idles 77 µs."""
    a = _analysis(sync_loop_trace(tmp_path, iterations=10, item_every=10))
    assert len(a.ranks[0].patterns.syncs) == 1
    assert rules_host.avoid_sync(a).saving_us == pytest.approx(16.0)


def test_avoid_sync_silent_when_the_sync_does_not_stall(tmp_path):
    """A sync after which the next kernel is already queued (launched before the sync): no bubble."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 1000)
    b.launch(1, 5, ADD, 10, 100)
    b.launch(7, 5, ADD, 111, 80)  # queued behind the first kernel
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
           "tid": b.tid, "ts": 20, "dur": 90, "args": {"correlation": 99000}})  # returns at 110
    a = _analysis(b.write(tmp_path / "nostall.json"))
    assert a.ranks[0].patterns.syncs[H.SY_BUBBLE_US].tolist() == pytest.approx([1.0])  # 110 -> 111
    assert rules_host.avoid_sync(a) is None  # 1 µs of 1000: under MIN_SAVING_PCT


def copy_trace(tmp_path, pinned: bool = False, gemm_us: float = 5000.0, copy_sync_us: float = 0.0):
    """Two 10 ms steps: a 19.3 MB host-to-device copy (call 2000 µs, copy 1900 µs), then a kernel of
    `gemm_us`; `copy_sync_us` > 0: the copy's op also syncs the stream for that long after the
    memcpy call, and a later `.item()` syncs for 30 µs (not the copy's)."""
    b = TraceBuilder()
    name = "Memcpy HtoD (Pinned -> Device)" if pinned else "Memcpy HtoD (Pageable -> Device)"
    for step in (1, 2):
        t = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t, 10000)
        to = b.op("aten::copy_", t + 40, 2020 + copy_sync_us)
        b.launch(t + 50, 2000, name, t + 100, 1900, ext=to, api="cudaMemcpyAsync", kind="memcpy",
                 bytes=19267584)
        if copy_sync_us:
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
                   "tid": b.tid, "ts": t + 2052, "dur": copy_sync_us, "args": {"correlation": 88000 + step}})
        b.launch(t + 2060 + copy_sync_us, 5, GEMM, t + 2070 + copy_sync_us, gemm_us)
        if copy_sync_us:
            b.op("aten::item", t + 9000, 40)
            b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid,
                   "tid": b.tid, "ts": t + 9005, "dur": 30, "args": {"correlation": 89000 + step}})
    return b.write(tmp_path / "copy.json")


PINNED_COPY_US = 19267584 / 54e3  # the copy's bytes at the H200's pinned 54 GB/s: 356.8 µs


def test_pinned_memory_fires_on_pageable_copies(tmp_path):
    a = _analysis(copy_trace(tmp_path))
    s = RULES_BY_ID["pinned_memory"].run(a)  # the check, with its row's snippet
    # per step (span 10000 µs): the CPU sat 2000 µs in the copy call, so without it the CPU needs
    # 10000 − 2000 = 8000 µs; the GPU needs the 5000 µs kernel + the copy at pinned speed (356.8 µs,
    # instead of 1900); the step is the longer, 8000 µs: 2000 µs saved (more than the copy time
    # alone, 1900 − 356.8 = 1543.2)
    assert s.saving_us == pytest.approx(2 * 2000.0)
    assert s.saving_pct == pytest.approx(100 * 2 * 2000.0 / 20000)
    rows = {r["step"]: r for r in s.evidence}
    assert rows[1]["blocked_us"] == pytest.approx(2000) and rows[2]["pinned_copy_us"] == pytest.approx(356.8, abs=0.1)
    assert rows[1]["cpu_after_us"] == pytest.approx(8000) and rows[1]["gpu_after_us"] == pytest.approx(5000 + PINNED_COPY_US)
    assert rows[2]["gbps"] == pytest.approx(19267584 / 1900 / 1e3)
    assert "non_blocking=True" in s.snippet


def test_pinned_memory_gpu_bound_after_the_change(tmp_path):
    """A 7900 µs kernel: unblocked, the CPU needs 8000 µs but the GPU 7900 + 356.8 = 8256.8 µs, so
    the step takes that and saves 10000 − 8256.8 = 1743.2 µs (the copy's 1543.2 plus the 200 µs the
    GPU sat idle in the step: 100 before the copy, 70 between it and the kernel, 30 at the end)."""
    s = rules_host.pinned_memory(_analysis(copy_trace(tmp_path, gemm_us=7900.0)))
    assert s is not None
    assert s.saving_us == pytest.approx(2 * (10000 - 7900 - PINNED_COPY_US))
    assert s.evidence[0]["gpu_after_us"] == pytest.approx(7900 + PINNED_COPY_US)


def test_pinned_memory_counts_the_copys_own_sync(tmp_path):
    """The copy's op also syncs the stream for 150 µs: the CPU is blocked 2000 + 150 µs per step, so
    it needs 10000 − 2150 = 7850 µs (more than the GPU's 5356.8): 2150 µs saved per step. The later
    `.item()` sync is not the copy's: it stays in the CPU's time and out of copy_syncs."""
    a = _analysis(copy_trace(tmp_path, copy_sync_us=150.0))
    p = a.ranks[0].patterns
    assert p.syncs[H.SY_PAGEABLE].tolist() == [True, False, True, False]
    assert int(p.copy_syncs.sum()) == 2  # one per step, the copy op's
    s = rules_host.pinned_memory(a)
    assert s is not None
    assert s.saving_us == pytest.approx(2 * 2150.0)
    assert s.evidence[0]["blocked_us"] == pytest.approx(2150.0)


def test_pinned_memory_silent_on_pinned_copies(tmp_path):
    a = _analysis(copy_trace(tmp_path, pinned=True))
    assert a.ranks[0].patterns.copies.empty
    assert rules_host.pinned_memory(a) is None


def loader_trace(tmp_path, load_us: float, single: bool = True):
    """Two 10 ms steps: the main thread loads a batch for `load_us`, then a 5 ms kernel runs."""
    b = TraceBuilder()
    it = "_SingleProcessDataLoaderIter" if single else "_MultiProcessingDataLoaderIter"
    for step in (1, 2):
        t = 10000 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t, 10000)
        b.op(f"enumerate(DataLoader)#{it}.__next__", t + 10, load_us)
        b.launch(t + load_us + 20, 5, GEMM, t + load_us + 30, 5000)
    return b.write(tmp_path / "loader.json")


def test_dataloader_workers_fires_when_loading_dominates(tmp_path):
    a = _analysis(loader_trace(tmp_path, 4000))
    s = RULES_BY_ID["dataloader_workers"].run(a)  # the check, with its row's snippet
    assert s.saving_us == pytest.approx(8000)  # the GPU is idle through both 4 ms loads
    assert s.saving_pct == pytest.approx(40.0)
    assert [r["dataloader_us"] for r in s.evidence] == [4000, 4000]
    assert "num_workers=0" in s.title and "num_workers=" in s.snippet


def test_dataloader_workers_counts_only_gpu_idle_time(tmp_path):
    """Step 2's load overlaps the end of step 1's kernel (4030 -> 9030): only the idle part counts."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#1", 0, 6000)
    b.op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 10, 4000)
    b.launch(4020, 5, GEMM, 4030, 5000)
    b.annotation("ProfilerStep#2", 6000, 6000)
    b.op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 6010, 4000)  # 6010 -> 10010
    b.launch(10020, 5, GEMM, 10030, 1000)
    a = _analysis(b.write(tmp_path / "overlap.json"))
    s = rules_host.dataloader_workers(a)
    assert s.saving_us == pytest.approx(4000 + (10010 - 9030))
    assert "workers do not keep up" in s.title


def test_dataloader_workers_silent_when_loading_is_short(tmp_path):
    a = _analysis(loader_trace(tmp_path, 200, single=False))
    assert len(a.ranks[0].patterns.dataloader) == 2  # seen, 2 % of the span: below DATALOADER_MIN_PCT
    assert rules_host.dataloader_workers(a) is None


def comm_trace(tmp_path, exposed: bool = True, rank: int | None = None, name: str = "comm.json"):
    """Compute on stream 7; all-reduces on stream 20, either after the compute (exposed) or beside it."""
    b = TraceBuilder()
    if rank is not None:
        b.top["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    b.annotation("ProfilerStep#1", 0, 9000)
    b.launch(1, 5, GEMM, 100, 4000)  # compute A: 100 -> 4100
    if exposed:
        b.launch(10, 5, ALLREDUCE, 4100, 2000, stream=20)  # exposed 2000
        b.launch(20, 5, GEMM, 6100, 1000)  # compute B: 6100 -> 7100
        b.launch(30, 5, ALLREDUCE, 7100, 1000, stream=20)  # the last bucket: exposed 1000
    else:
        b.launch(10, 5, ALLREDUCE, 1100, 2000, stream=20)  # under compute A
        b.launch(20, 5, GEMM, 4100, 1000)
        b.launch(30, 5, ALLREDUCE, 4200, 800, stream=20)  # under compute B
    return b.write(tmp_path / name)


def test_overlap_comm_fires_on_exposed_collectives(tmp_path):
    a = _analysis(comm_trace(tmp_path))
    s = rules_host.overlap_comm(a)
    # exposed 3000 µs; the last all-reduce (1000) cannot overlap; 5000 µs of compute to hide behind
    assert s.saving_us == pytest.approx(2000)
    row = s.evidence[0]
    assert (row["collectives"], row["exposed_us"], row["compute_us"], row["overlap_us"]) == (2, 3000, 5000, 0)
    assert "rank" not in row  # one rank: no rank column
    assert "AllReduce" in row["top_kernel"]


def test_overlap_comm_per_rank_on_two_ranks(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    comm_trace(d, rank=0, name="rank0.json")
    comm_trace(d, rank=1, name="rank1.json")
    a = _analysis(d)
    s = rules_host.overlap_comm(a)
    assert s.saving_us == pytest.approx(2000)  # per rank: (2000 + 2000) / 2
    assert len(s.evidence) == 2 and "per rank (mean of 2 ranks)" in s.basis
    assert sorted(r["rank"] for r in s.evidence) == [0, 1]


def test_overlap_comm_silent_when_overlapped(tmp_path):
    a = _analysis(comm_trace(tmp_path, exposed=False))
    comm = a.ranks[0].patterns.comm
    assert comm["exposed_us"].tolist() == [0.0]
    assert rules_host.overlap_comm(a) is None
