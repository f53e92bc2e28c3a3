"""Class `sleep` (torch.cuda._sleep's spin_kernel): classified, busy, no cost, no suggestion."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from conftest import SHARED_TRACES
from test_suggestions_kernels import Stream
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers import analyze
from tracekit.analyzers.costs.attribution import FLOPS, ROLE, ROLE_NONE
from tracekit.analyzers.kernels import (
    CLASS,
    CLASSES,
    OTHER,
    SLEEP,
    SUM_COUNT,
    SUM_KEY,
    SUM_SHARE,
    SUM_TIME,
    classify,
    classify_name,
)
from tracekit.cli import main
from tracekit.report.meta import SHAPES_WARNING, warnings
from tracekit.report.palette import CLASS_COLORS
from tracekit.report.palette import OTHER as OTHER_COLOR
from tracekit.suggestions.rules import suggest

SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"  # as CUPTI names it (HTA cuda_event_sync)
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
       "at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>, at::detail::Array<char*, 2>)")
EVENT_SYNC = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"


@pytest.mark.parametrize("name, cls", [
    (SPIN, SLEEP),
    ("at::cuda::(anonymous namespace)::spin_kernel(long long)", SLEEP),  # int64_t on Windows
    ("spin_kernel(long)", SLEEP),  # THC's global spin_kernel (THCSleep.cu, PyTorch 1.x)
    ("at::cuda::(anonymous namespace)::busy_wait_for_flag_kernel(int*)", SLEEP),
    ("at::cuda::(anonymous namespace)::clear_flag_kernel(int*)", OTHER),  # one store: no wait
    ("my_spin_kernel(int)", OTHER),  # someone else's kernel of that name is not torch's sleep
    ("void mylib::spin_kernel<float>(float*)", OTHER),
])
def test_sleep_names(name, cls):
    assert classify_name(name)[0] == cls
    if cls == SLEEP:  # no op-restricted row (topk's "." -> reduction) takes a sleep
        assert classify_name(name, op="aten::topk")[0] == SLEEP


def test_sleep_is_a_registered_class_with_a_colour():
    assert SLEEP in CLASSES and CLASSES[-1] == OTHER
    assert CLASS_COLORS[SLEEP] != OTHER_COLOR
    assert len(set(CLASS_COLORS.values())) == len(CLASS_COLORS)  # every class its own colour


def _sleep_trace(tmp_path, shapes: bool = True):
    """One 200 µs step; GPU activities back to back (no overlap), durations in µs:
    spin_kernel 40 launched outside any op (as torch.cuda._sleep does), spin_kernel 30 under a CPU op
    with shapes but no cost model, spin_kernel 20 under a CPU op without shapes, an add kernel 8
    under aten::add, a 2 µs device-to-host memcpy. GPU time 100 µs, of which 90 sleep."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 200)
    b.launch(10, 5, SPIN, 20, 40)
    dims = {"Input Dims": [[1]], "Input type": ["float"]} if shapes else {}
    shaped = b.op("my_sleep", 20, 10, **dims)
    b.launch(22, 5, SPIN, 60, 30, ext=shaped)
    bare = b.op("sleep_block", 40, 10)
    b.launch(42, 5, SPIN, 90, 20, ext=bare)
    add = b.op("aten::add_", 60, 10, **({"Input Dims": [[1024], [1024], []],
                                           "Input type": ["float", "float", "Scalar"]} if shapes else {}))
    b.launch(62, 5, ADD, 110, 8, ext=add)
    b.launch(80, 5, "Memcpy DtoH (Device -> Pageable)", 118, 2, api="cudaMemcpyAsync", kind="memcpy", bytes=4)
    return b.write(tmp_path / "sleep.json")


def test_synthetic_sleep_class_share_and_costs(tmp_path):
    trace = tracekit.load_trace(_sleep_trace(tmp_path))
    rank = trace.rank()
    kc = classify(rank)
    spin = (rank.gpu["name"] == SPIN).to_numpy()
    assert list(kc.table[CLASS][spin]) == [SLEEP] * 3
    classes = kc.classes.set_index(SUM_KEY)
    # hand-derived: (40 + 30 + 20) / (40 + 30 + 20 + 8 + 2) µs of GPU activity
    assert classes.loc[SLEEP, SUM_TIME] == 90.0 and classes.loc[SLEEP, SUM_COUNT] == 3
    assert classes.loc[SLEEP, SUM_SHARE] == pytest.approx(0.9)
    assert kc.other_share == 0.0

    a = analyze(trace)
    ra = a.ranks[0]
    # busy: the program waits on a sleep as on any kernel; computation for the temporal breakdown
    assert a.totals.gpu_busy_us == pytest.approx(100.0)
    assert ra.temporal.compute_us == pytest.approx(98.0) and ra.temporal.non_compute_us == pytest.approx(2.0)
    # no cost: FLOPs unknown, never the working kernel of an op, never unmodeled nor unshaped time
    costs = ra.costs
    assert all(math.isnan(f) for f in costs.table[FLOPS][spin]) and set(costs.table[ROLE][spin]) == {ROLE_NONE}
    assert "my_sleep" not in dict(costs.unmodeled)
    assert costs.unshaped_us == 0.0
    assert not [w for w in a.warnings if "without shapes" in w or "FLOPs/bytes unknown" in w]
    assert a.classes.set_index(SUM_KEY).loc[SLEEP, SUM_SHARE] == pytest.approx(0.9)


def test_sleep_needs_no_shapes(tmp_path):
    trace = tracekit.load_trace(_sleep_trace(tmp_path, shapes=False))
    a = analyze(trace)
    ra = a.ranks[0]
    # only the add kernel (8 of 100 µs) ran under an op without shapes
    assert ra.costs.unshaped_us == pytest.approx(8.0)
    assert ra.facts is not None
    assert SHAPES_WARNING in warnings(a, ra.facts, ())  # the add kernel has no FLOPs: asking is right
    # a trace of sleeps and copies alone has nothing shapes would give FLOPs to
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.launch(10, 5, SPIN, 20, 40)
    b.launch(30, 5, "Memcpy DtoH (Device -> Pageable)", 60, 2, api="cudaMemcpyAsync", kind="memcpy", bytes=4)
    only = analyze(tracekit.load_trace(b.write(tmp_path / "only_sleep.json")))
    assert only.ranks[0].facts is not None
    assert SHAPES_WARNING not in warnings(only, only.ranks[0].facts, ())


def _chain(tmp_path, kernel: str):
    """test_suggestions_kernels.chain_trace's GPU-bound 8192x8192 fp32 mul → add → gelu → add chain
    (on which fuse_elementwise fires), every kernel named `kernel`."""
    s = Stream()
    big, n, f32 = [8192, 8192], [8192], "float"
    s.kernel("aten::mul", kernel, 120, [big, n], [f32, f32])
    s.kernel("aten::add", kernel, 120, [big, n, []], [f32, f32, "Scalar"])
    s.kernel("aten::gelu", kernel, 120, [big], [f32])
    s.kernel("aten::add", kernel, 170, [big, big, []], [f32, f32, "Scalar"])
    return analyze(tracekit.load_trace(s.write(tmp_path / f"chain_{len(kernel)}.json")))


def test_no_rule_fuses_or_speeds_up_sleeps(tmp_path):
    ew = _chain(tmp_path, "void at::native::vectorized_elementwise_kernel<4, at::native::add>")
    assert "fuse_elementwise" in {s.id for s in suggest(ew)}  # the control: the chain is fusable
    a = _chain(tmp_path, SPIN)
    assert a.classes.set_index(SUM_KEY).loc[SLEEP, SUM_SHARE] == 1.0
    fired = suggest(a)
    assert "fuse_elementwise" not in {s.id for s in fired}
    for s in fired:  # nothing else claims the sleeps' time either
        assert SPIN not in json.dumps(s.evidence, default=str), s.id


def _raw_share(path) -> float:
    """spin_kernel's share of GPU activity time, from the raw JSON alone (not the loader)."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    # the denominator is every GPU activity (kernels, memcpys, memsets): what tracekit's class
    # `share` divides by (its `other_share` of 70.6 % counts the file's one memcpy too)
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    spin = sum(e["dur"] for e in gpu if e["name"] == SPIN)
    return spin / sum(e["dur"] for e in gpu)


def test_event_sync_trace_sleep_share(capsys):
    path = SHARED_TRACES / EVENT_SYNC
    if not path.exists():
        pytest.skip(f"{EVENT_SYNC} is absent (../shared/traces)")
    expected = _raw_share(path)  # sum of spin_kernel's dur / sum of every GPU activity's dur
    assert expected > 0.5
    kc = classify(tracekit.load_trace(path).rank())
    assert kc.other_share <= 0.05
    assert kc.classes.set_index(SUM_KEY).loc[SLEEP, SUM_SHARE] == pytest.approx(expected, rel=1e-12)
    # the same in `analyze --json` (its one step is the whole trace)
    assert main(["analyze", "--json", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    shares = {c["class"]: c["share"] for c in out["classes"]}
    assert shares.get(OTHER, 0.0) <= 0.05 and out["summary"]["other_share"] <= 0.05
    assert shares[SLEEP] == pytest.approx(expected, rel=1e-12)
