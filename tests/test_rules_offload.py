"""Rule optimizer_on_gpu: an optimizer step run on the host between gradient and weight copies, worked out by hand on synthetic traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_analysis import analysed_file
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze, step_parts
from tracekit.analyzers.detectors import offload as of
from tracekit.compare.applied import Applied, applied
from tracekit.suggestions import rules_offload, rules_optimizer
from tracekit.suggestions.rules import RULES_BY_ID
from tracekit.suggestions.snippets import OPTIMIZER_ON_GPU_DEEPSPEED

GEMM = "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNN"
D2H = "Memcpy DtoH (Device -> Pageable)"
H2D = "Memcpy HtoD (Pageable -> Device)"
FUSED = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata<4>, "
         "FusedAdamMathFunctor<float, 4, ADAM_MODE::ADAMW, false>>")
PER_PARAM = "void at::native::vectorized_elementwise_kernel<4, at::native::lerp_kernel_scalar_weight<float>>"
MIB, GB = 1 << 20, 10**9
SIDE = 512  # each parameter 512 × 512 fp32 = 1 MiB
DIMS = {"Input Dims": [[SIDE, SIDE], [SIDE, SIDE]], "Input type": ["float", "float"]}
RULE = RULES_BY_ID["optimizer_on_gpu"]


def _sync(b: TraceBuilder, ts: float, ext: int) -> None:
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": b.pid, "tid": b.tid,
           "ts": ts, "dur": 2, "args": {"correlation": 900000 + int(ts), "External id": ext}})


def _mem(b: TraceBuilder, ts: float, nbytes: int, total: int, addr: int) -> None:
    b.raw({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": b.pid, "tid": b.tid,
           "ts": ts, "args": {"Bytes": nbytes, "Addr": addr, "Device Type": 1, "Device Id": 0,
                              "Total Allocated": total, "Total Reserved": total}})


def _copies(b: TraceBuilder, cpu: float, name: str, tensors: int) -> float:
    """`tensors` blocking 1 MiB copies from `cpu`, one every 220 µs: aten::copy_ (212 µs) whose
    cudaMemcpyAsync blocks 208 µs while its copy runs 200 µs, then the op's 2 µs stream sync."""
    for _ in range(tensors):
        cp = b.op("aten::copy_", cpu + 1, 212, **DIMS)
        b.launch(cpu + 2, 208, name, cpu + 5, 200, ext=cp, api="cudaMemcpyAsync", kind="memcpy", bytes=MIB)
        _sync(b, cpu + 211, cp)
        cpu += 220
    return cpu


def offload_trace(path: Path, *, tensors: int = 4, host_us: float = 6000.0, step_us: float = 10000.0,
                  name: str = "AdamW", variant: str = "host", used_gb: float | None = None, ranges: int = 1) -> Path:
    """Three steps of `step_us`. Each: forward+backward as 10 GEMMs of 100 µs (ops every 10 µs from +10,
    the GPU busy +20 → +1020); then from +1020, `variant`:
    host: `tensors` gradient copies down (_copies), Optimizer.step#<name>.step on the host for `host_us`
    (20 recorded _foreach ops, no launch), 10 µs, `tensors` weight copies up; the last call ends at
    +1020 + 2 × 220 × tensors + host_us + 10 (+8790 with the defaults), then nothing to the step's end.
    fused: the range (100 µs) launches 3 fused AdamW kernels (4 µs call, 50 µs kernel), no copies.
    per_parameter: the range (2000 µs) launches 20 lerp kernels (a GPU optimizer, not fused), no copies.
    used_gb: memory events putting that much in use on the 150 GB device at each step's peak.
    ranges: the host step split into that many back-to-back ranges (two optimizers over the same copies)."""
    b = TraceBuilder()
    for step in (1, 2, 3):
        t = step_us * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t, step_us)
        for i in range(10):
            mm = b.op("aten::mm", t + 10 + 10 * i, 8, **DIMS)
            b.launch(t + 12 + 10 * i, 5, GEMM, t + 20 + 100 * i, 100, ext=mm)
        if used_gb is not None:
            _mem(b, t + 11, int(used_gb * GB), int(used_gb * GB), 0xA0 + step)
        cpu = t + 1020.0
        if variant == "fused":
            b.annotation(f"Optimizer.step#{name}.step", cpu, 100)
            for k in range(3):
                op = b.op("aten::_fused_adamw_", cpu + 10 + 30 * k, 20)
                b.launch(cpu + 12 + 30 * k, 4, FUSED, cpu + 20 + 60 * k, 50, ext=op)
            continue
        if variant == "per_parameter":
            b.annotation(f"Optimizer.step#{name}.step", cpu, 2000)
            for k in range(20):
                op = b.op("aten::lerp_", cpu + 10 + 90 * k, 20, **DIMS)
                b.launch(cpu + 12 + 90 * k, 6, PER_PARAM, cpu + 20 + 90 * k, 30, ext=op)
            continue
        cpu = _copies(b, cpu, D2H, tensors)
        for k in range(ranges):
            b.annotation(f"Optimizer.step#{name}.step", cpu + k * host_us / ranges, host_us / ranges)
        for j in range(20):
            b.op("aten::_foreach_mul_", cpu + 10 + j * host_us / 20, host_us / 40)
        _copies(b, cpu + host_us + 10, H2D, tensors)
    return b.write(path)


# the fused AdamW of 4 × 512² = 1,048,576 fp32 parameters: 28 B each (param, grad, exp_avg, exp_avg_sq
# read, param, exp_avg, exp_avg_sq written: 7 × 4 B) / the H200's 4.8 TB/s = 6.1167 µs
PARAMS = 4 * SIDE * SIDE
FUSED_US = PARAMS * 28 / 4.8e12 * 1e6


def test_the_detector_reads_the_host_step_and_its_copies(tmp_path):
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json")))
    p = a.ranks[0].patterns
    t = p.offload
    assert t[of.OF_STEP].tolist() == [1, 2, 3]
    row = t.iloc[0]
    assert row[of.OF_OPTIMIZER] == "AdamW" and row[of.OF_HOST_US] == pytest.approx(6000.0)
    assert row[of.OF_KERNELS] == 0 and row[of.OF_STEP_KERNELS] == 10  # the model's GEMMs
    assert (row[of.OF_D2H], row[of.OF_H2D]) == (4, 4)
    assert row[of.OF_D2H_BYTES] == row[of.OF_H2D_BYTES] == 4 * MIB
    assert row[of.OF_MATCHED] == 8 and row[of.OF_PAGEABLE] == 8  # every size both ways; all pageable
    assert row[of.OF_COPY_US] == pytest.approx(8 * 200.0)
    assert row[of.OF_CALL_US] == pytest.approx(8 * (208.0 + 2.0))  # each copy call and its op's sync
    assert row[of.OF_PARAMS] == PARAMS  # 4 MiB up / 4 B (the copy_ op's first input: float)
    assert int(p.offload_copies.sum()) == 24 and int(p.offload_calls.sum()) == 48  # 3 steps × 8 (copy + sync)
    # the diff target: the host step + its copy calls, per step
    assert RULE.target.measure(a, step_parts.steady(a)) == pytest.approx(6000.0 + 1680.0)


def test_traced_saving_by_hand(tmp_path):
    s = RULE.run(analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json"))))
    assert s is not None and "fused=True" in s.snippet
    assert round(FUSED_US, 4) == 6.1167
    # per step: the host step 6000 µs + the copy calls and syncs 8 × 210 µs − the fused step
    assert s.per_step_us == pytest.approx(6000.0 + 1680.0 - FUSED_US)
    assert s.saving_us == pytest.approx(3 * (7680.0 - FUSED_US))
    assert "AdamW.step runs on the host (6.00 ms, 0 kernels) between 8 gradient/weight copies" in s.title
    # no memory recorded: the state size and the condition for keeping it offloaded are given
    assert "16.8 MB of fp32 Adam state (1,048,576 parameters × 16 B)" in s.title
    assert "keep it offloaded only if" in s.title
    assert s.evidence[0]["pageable"] == 8 and s.evidence[0]["pinned"] == 0


def test_what_if_replay_by_hand(tmp_path):
    """The change on the projected steps: everything from the first gradient copy's call (+1022) to the
    last weight copy's sync (+8790) goes but one 3 µs launch, 7768 − 3 = 7765 µs of the traced CPU
    timeline (the fused kernel, 6.1 µs after the GEMMs end at +1020, ends long before the CPU tail);
    the projection had already taken the profiler's cost of the recorded events in that stretch from
    it, at most all it took from the step (traced 10,000 − projected)."""
    result = analysed_file(offload_trace(tmp_path / "t.json"))
    first = result.suggestions[0]
    assert first.id == "optimizer_on_gpu" and first.whatif and "what-if replay" in first.whatif
    projected = result.analysis.unprofiled.step_us
    assert 10000.0 - projected > 0
    assert 7765.0 - (10000.0 - projected) <= first.per_step_us <= 7765.0
    ids = {s.id for s in result.suggestions}
    assert "fused_optimizer" not in ids


def test_two_host_optimizers_share_the_copies(tmp_path):
    """Two host ranges of 3000 µs in a step around the same copies: each copy is counted once (by the
    first range), so the step's saving is the one range's: 6000 + 1680 − the fused step."""
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", ranges=2)))
    t = a.ranks[0].patterns.offload
    assert t[of.OF_STEP].tolist() == [1, 1, 2, 2, 3, 3]
    assert t[of.OF_D2H].tolist() == [4, 0] * 3 and t[of.OF_H2D].tolist() == [4, 0] * 3
    assert t[of.OF_CALL_US].tolist() == pytest.approx([1680.0, 0.0] * 3)
    s = RULE.run(a)
    assert s is not None and s.per_step_us == pytest.approx(6000.0 + 1680.0 - FUSED_US)


def test_silent_on_the_fused_step(tmp_path):
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", variant="fused")))
    assert a.ranks[0].patterns.offload.empty  # the range launches the fused kernels: on the GPU
    assert RULE.run(a) is None
    assert "optimizer_on_gpu" not in {s.id for s in analysed_file(tmp_path / "t.json").suggestions}
    before = analyze(tracekit.load_trace(offload_trace(tmp_path / "b.json")))
    assert applied("optimizer_on_gpu", before, a) == Applied(True, "optimizer steps run on the host per step 1.0 → 0.0")


def test_a_gpu_optimizer_stays_fused_optimizers(tmp_path):
    """An unfused optimizer on the GPU (20 lerp kernels in its range): not a host step; fused_optimizer's."""
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", variant="per_parameter")))
    assert a.ranks[0].patterns.offload.empty and RULE.run(a) is None
    assert rules_optimizer.fused_optimizer(a) is not None


def test_silent_below_two_percent_of_the_step(tmp_path):
    # a 400 ms step: the 6 ms host step is 1.5 % of it
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", step_us=400000.0)))
    assert len(a.ranks[0].patterns.offload) == 3  # found, but too small to say
    assert RULE.run(a) is None


def test_silent_without_weight_copies_up(tmp_path):
    """One 1 MiB tensor each way is enough (MIN_COPY_BYTES); gradients copied down with nothing copied
    back up is not an offloaded optimizer (a snapshot, pinned_memory's)."""
    assert of.MIN_COPY_BYTES == MIB
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", tensors=1)))
    assert len(a.ranks[0].patterns.offload) == 3
    b = TraceBuilder()
    for step in (1, 2):
        t = 10000.0 * (step - 1)
        b.annotation(f"ProfilerStep#{step}", t, 10000.0)
        b.launch(t + 10, 5, GEMM, t + 20, 1000)
        b.annotation("Optimizer.step#AdamW.step", t + 1100, 6000)
        _copies(b, t + 7200, D2H, 4)  # copies down after the step, none up: a snapshot, not an offload
    a = analyze(tracekit.load_trace(b.write(tmp_path / "down.json")))
    assert a.ranks[0].patterns.offload.empty and RULE.run(a) is None


def test_deepspeed_cpu_adam_and_gpu_memory(tmp_path):
    # 100 GB in use on the 150 GB H200: the 16.8 MB of state fits; the ZeRO config is the change
    a = analyze(tracekit.load_trace(offload_trace(tmp_path / "t.json", name="DeepSpeedCPUAdam", used_gb=100)))
    s = RULE.run(a)
    assert s is not None and s.snippet == OPTIMIZER_ON_GPU_DEEPSPEED and '"device": "none"' in s.snippet
    assert "DeepSpeedCPUAdam.step runs on the host" in s.title and "offload_optimizer" in s.title
    assert "keep it offloaded" not in s.title and "16.8 MB of fp32 Adam state" in s.formula
    assert "50.0 GB free on the GPU" in s.formula
    # 149.99 GB in use: 10 MB free, less than the state: memory is why it is offloaded, silent
    full = analyze(tracekit.load_trace(offload_trace(tmp_path / "f.json", name="DeepSpeedCPUAdam", used_gb=149.99)))
    assert len(full.ranks[0].patterns.offload) == 3 and RULE.run(full) is None
    assert rules_offload.STATE_BYTES_PER_PARAM * PARAMS > 10e6
