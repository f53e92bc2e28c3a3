"""larger_batch: a step that waits on per-step host work, with room in memory for k× the batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.suggestions.rules import RULES_BY_ID
from tracekit.suggestions.rules_memory import multiple

GB = 10**9
RULE = RULES_BY_ID["larger_batch"]
H200_B256 = Path(__file__).resolve().parent / "data" / "memory" / "train_memory_b256.trace.json.gz"


def mem(b: TraceBuilder, ts: float, nbytes: int, total: int, reserved: int, addr: int) -> None:
    b.raw({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": b.pid, "tid": b.tid,
           "ts": ts, "args": {"Bytes": nbytes, "Addr": addr, "Device Type": 1, "Device Id": 0,
                              "Total Allocated": total, "Total Reserved": reserved}})


def launch_steps(path: Path, *, kernel_us: float = 5.0, transient_gb: int = 20, memory: bool = True,
                 load_us: float = 0.0, load_op: str = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") -> Path:
    """Four 1000 µs steps. Each: 20 aten::mm ops every 50 µs from the step start, each with a 5 µs
    launch call 2 µs in and its kernel 10 µs in (`kernel_us` long). Memory (device 0, tracebuilder's
    H200: 150 GB): 10 GB in use before each step, `transient_gb` allocated 3 µs in and freed 900 µs
    in; reserved = allocated at the peak. `load_us`: each step that much longer, `load_op` (a
    DataLoader next()) on the main thread at its start first and the ops (and memory events) after it."""
    b = TraceBuilder()
    for s in range(4):
        t0 = (1000.0 + load_us) * s
        b.annotation(f"ProfilerStep#{s}", t0, 1000.0 + load_us)
        if load_us:
            b.op(load_op, t0 + 1, load_us - 2)
            t0 += load_us
        for i in range(20):
            t = t0 + 50.0 * i
            ext = b.op("aten::mm", t, 20)
            b.launch(t + 2, 5, "gemm_kernel", t + 10, kernel_us, ext=ext)
        if memory:
            peak = (10 + transient_gb) * GB
            mem(b, t0 + 3, transient_gb * GB, peak, peak, 0xA0 + s)
            mem(b, t0 + 900, -transient_gb * GB, 10 * GB, peak, 0xA0 + s)
    return b.write(path)


def _run(path: Path):
    return RULE.run(analyze(tracekit.load_trace(path)))


def test_fires_on_a_launch_bound_step_with_room_for_4x(tmp_path):
    a = analyze(tracekit.load_trace(launch_steps(tmp_path / "t.json")))
    assert a.verdict == "launch-bound"
    s = RULE.run(a)
    assert s is not None
    # by hand, per step: GPU busy 20 × 5 = 100 µs, the other 900 µs the GPU waits for launches (the
    # 45 µs between kernels, 10 µs before the first one and 35 µs after the last one). Memory: 10 GB
    # at the start, 30 GB at the peak, reserved/allocated 1: the batch could grow (150 − 10) / 20 =
    # 7.0×; the multiple suggested is the largest power of two ≤ 7: 4. Per step's worth of samples:
    # 900 × (1 − 1/4) = 675 µs; over the 4 steps 2700 µs, of a 4000 µs window: 67.5 %.
    assert s.per_step_us == pytest.approx(675.0)
    assert s.saving_us == pytest.approx(2700.0) and s.saving_pct == pytest.approx(67.5)
    (row,) = s.evidence
    assert row["batch_multiple"] == 4 and row["batch_factor_estimate"] == pytest.approx(7.0)
    assert (row["span_us"], row["gpu_busy_us"], row["host_wait_us"]) == (1000.0, 100.0, 900.0)
    assert s.title.startswith("Try a 4× larger batch") and "30.0 GB of 150 GB" in s.title
    assert "scale the learning rate" in s.formula and "an estimate" in s.formula
    assert "batch_size=4 * batch_size" in s.snippet


def test_multiple_is_the_power_of_two_within_the_estimate_at_most_8():
    assert [multiple(f) for f in (1.99, 2.0, 2.33, 3.99, 4.0, 7.0, 8.0, 119.0, float("nan"))] == \
        [0, 2, 2, 2, 4, 4, 8, 8, 0]


def test_only_twice_the_batch_when_the_estimate_is_under_4(tmp_path):
    # transient 60 GB: (150 − 10) / 60 = 2.33× -> 2; 900 × (1 − 1/2) = 450 µs per step
    s = _run(launch_steps(tmp_path / "t.json", transient_gb=60))
    assert s is not None and s.evidence[0]["batch_multiple"] == 2 and s.per_step_us == pytest.approx(450.0)


def test_silent_without_room_for_twice_the_batch(tmp_path):
    # transient 80 GB: (150 − 10) / 80 = 1.75×: a doubled batch would not fit
    assert _run(launch_steps(tmp_path / "t.json", transient_gb=80)) is None


def test_silent_on_a_gpu_bound_step(tmp_path):
    # 45 µs kernels every 50 µs: GPU busy 900 of 1000 µs per step: gpu-bound, a larger batch adds GPU time
    path = launch_steps(tmp_path / "t.json", kernel_us=45.0)
    a = analyze(tracekit.load_trace(path))
    assert a.verdict == "gpu-bound" and a.ranks[0].memory.batch_factor == pytest.approx(7.0)
    assert RULE.run(a) is None


def test_silent_without_memory_events(tmp_path):
    a = analyze(tracekit.load_trace(launch_steps(tmp_path / "t.json", memory=False)))
    assert a.verdict == "launch-bound" and a.ranks[0].memory is None
    assert RULE.run(a) is None


def test_silent_when_the_step_waits_on_data_loading(tmp_path):
    # a 2 ms DataLoader next() on the main thread ahead of the same launches (2 of the 2.9 ms the GPU
    # idles per step): host-bound on data loading, which grows with the samples; a larger batch does
    # not share it
    a = analyze(tracekit.load_trace(launch_steps(tmp_path / "t.json", load_us=2000.0)))
    assert (a.verdict, a.cause) == ("host-bound", "data_loading") and a.ranks[0].memory.batch_factor > 2
    assert RULE.run(a) is None


def test_silent_when_the_step_waits_on_cpu_work(tmp_path):
    # the same 2 ms on the main thread in a CPU op (preprocessing, often per sample): host-bound on
    # CPU work, which a larger batch need not share
    path = launch_steps(tmp_path / "t.json", load_us=2000.0, load_op="aten::to_dense")
    a = analyze(tracekit.load_trace(path))
    assert (a.verdict, a.cause) == ("host-bound", "cpu_work")
    assert RULE.run(a) is None


def test_what_if_replays_the_host_side_per_sample(tmp_path):
    result = analysed_file(launch_steps(tmp_path / "t.json"))
    (s,) = [x for x in result.suggestions if x.id == "larger_batch"]
    u = result.analysis.unprofiled
    assert u is not None and u.trusted
    # the projected step is the CPU's own time (the CPU never waits for the GPU). Replayed with its host
    # side × 1/4 and the GPU durations as they are (a step at 4× the batch, per sample), the CPU still
    # sets the step (a quarter of the projected step against the GPU's 20 × 5 = 100 µs of kernels). So
    # per step's worth of samples the saving is 3/4 of the projected step.
    assert s.whatif.startswith("what-if replay") and s.per_step_us == pytest.approx(u.step_us * (1 - 1 / 4))
    assert s.traced_saving_us == pytest.approx(2700.0)  # the rule's own estimate, kept


def test_silent_on_the_h200_batch_256_trace():
    if not H200_B256.exists():
        pytest.skip("tests/data/memory/train_memory_b256.trace.json.gz is not in this checkout")
    # the H200 recording at batch 256 (benchmarks/gpu/memory_validate.py): ~289 ms steps, gpu-bound
    # with room for ~4.7× the batch: a larger batch only adds GPU time
    a = analyze(tracekit.load_trace(H200_B256))
    assert a.verdict == "gpu-bound" and a.ranks[0].memory.batch_factor > 4
    assert RULE.run(a) is None


TRACELENS = "tracelens"


@pytest.mark.parametrize("name, fires", [
    # MI300 inference of a small BERT at a small batch: launch-bound, peaks at 224 MB of 206 GB
    ("mi300_gaunernst_bert-small-uncased__1016001.json.gz", True),
    # MI300 TimeSformer: host-bound on 270 ms of CPU work per step (not shared by a larger batch)
    ("mi300/facebook_timesformer-base-finetuned-k400__1016002.json.gz", False),
])
def test_shared_traces(shared_traces, name, fires):
    path = shared_traces / TRACELENS / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    a = analyze(tracekit.load_trace(path))
    s = RULE.run(a)
    assert (s is not None) == fires
    if s is None:
        return
    (view,) = [r.memory for r in a.ranks]
    assert view is not None and view.batch_factor > 8  # headroom far beyond 8×: the multiple is capped at 8
    assert s.evidence[0]["batch_multiple"] == 8 and s.title.startswith("Try an 8× larger batch")
    # 7/8 of the GPU's launch and sync wait per step (the traced totals the rule reads)
    causes = a.totals.causes()
    assert s.per_step_us == pytest.approx((causes["launch"] + causes["sync"]) * 7 / 8 / a.totals.steps)
