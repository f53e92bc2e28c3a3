"""load_trace on tiny synthetic traces: every schema quirk, each link with a known answer."""

from __future__ import annotations

import json

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.trace import tables
from tracekit.trace.intervals import busy_time_us


def _one_gemm(b: TraceBuilder, t0: float = 1000.0) -> None:
    outer = b.op("aten::linear", t0, 50)
    inner = b.op("aten::addmm", t0 + 5, 40, **{"Input Dims": [[64], [64, 128], [128, 64]],
                                             "Input type": ["float", "float", "float"]})
    b.launch(t0 + 10, 8, "sm80_xmma_gemm_f32f32", t0 + 30, 20.5, ext=inner)
    assert outer < inner


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_object_form_links_kernel_to_launch_and_innermost_op(tmp_path, legacy, gz):
    b = TraceBuilder(legacy=legacy)
    b.annotation("ProfilerStep#3", 990, 200)
    _one_gemm(b)
    path = b.write(tmp_path / ("t.json.gz" if gz else "t.json"))
    r = tracekit.load_trace(path).rank()
    assert r.meta.schema == ("legacy" if legacy else "kineto")
    assert len(r.kernels) == 1
    k = r.gpu.iloc[0]
    assert r.runtime[tables.RT_NAME].iat[k[tables.GPU_LAUNCH]] == "cudaLaunchKernel"
    op = r.ops.iloc[k[tables.GPU_OP]]
    assert op[tables.OP_NAME] == "aten::addmm"
    assert op[tables.OP_DEPTH] == 1 and r.ops[tables.OP_NAME].iat[op[tables.OP_PARENT]] == "aten::linear"
    assert op[tables.OP_INPUT_DIMS] == [[64], [64, 128], [128, 64]]
    assert k[tables.GPU_STEP] == 3
    assert list(r.steps[tables.STEP_NUMBER]) == [3]
    assert (k[tables.GPU_GRID[0]], k[tables.GPU_BLOCK[0]], k[tables.GPU_REGISTERS]) == (4, 128, 32)
    assert r.meta.device_name == "NVIDIA H200"


def test_bare_array_form(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    r = tracekit.load_trace(b.write(tmp_path / "bare.json", bare=True)).rank()
    assert len(r.kernels) == 1 and r.gpu[tables.GPU_OP].iat[0] >= 0
    assert r.meta.device_name is None  # the bare form has no deviceProperties


@pytest.mark.parametrize(("api", "cat"), [("cuLaunchKernel", "cuda_driver"), ("cuLaunchKernelEx", "cuda_driver"),
                                          ("cudaLaunchKernelExC", "cuda_runtime"),
                                          ("hipLaunchKernel", "cuda_runtime"),
                                          ("hipExtModuleLaunchKernel", "cuda_runtime"),
                                          ("hipModuleLaunchKernel", "cuda_runtime")])
def test_every_launch_api_links(tmp_path, api, cat):
    b = TraceBuilder()
    ext = b.op("my_kernel_launcher", 0, 100)
    b.launch(10, 5, "my_kernel", 40, 3, ext=ext, api=api, cat=cat)
    r = tracekit.load_trace(b.write(tmp_path / "t.json")).rank()
    assert r.gpu[tables.GPU_LAUNCH].iat[0] == 0
    assert r.runtime[tables.RT_KIND].iat[0] == "kernel"
    assert r.runtime[tables.RT_API].iat[0] == ("driver" if cat == "cuda_driver" else "runtime")
    assert r.meta.platform == ("rocm" if api.startswith("hip") else "cuda")


def test_graph_launch_maps_to_many_kernels(tmp_path):
    b = TraceBuilder()
    ext = b.op("CUDAGraph::replay", 0, 100)
    corr = b.launch(10, 20, None, 0, 0, ext=ext, api="cudaGraphLaunch")
    for i in range(5):
        b.gpu(f"kernel_{i}", 50 + 10 * i, 5, corr)
    r = tracekit.load_trace(b.write(tmp_path / "g.json")).rank()
    assert len(r.launches) == 1 and r.launches[tables.RT_KIND].iat[0] == "graph"
    assert (r.gpu[tables.GPU_LAUNCH] == 0).all() and len(r.gpu) == 5
    assert (r.gpu[tables.GPU_OP] == 0).all()


def test_memcpy_memset_launches(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::copy_", 0, 100)
    b.launch(5, 10, "Memcpy HtoD (Pageable -> Device)", 20, 30, ext=ext, api="cudaMemcpyAsync",
             kind="memcpy", bytes=4096)
    b.launch(50, 5, "Memset (Device)", 60, 2, ext=ext, api="cudaMemsetAsync", kind="memset", bytes=64)
    r = tracekit.load_trace(b.write(tmp_path / "m.json")).rank()
    assert list(r.gpu[tables.GPU_KIND]) == ["memcpy", "memset"]
    assert list(r.gpu[tables.GPU_BYTES]) == [4096, 64]
    assert list(r.runtime[tables.RT_KIND]) == ["memcpy", "memset"]
    assert len(r.kernels) == 0 and (r.gpu[tables.GPU_OP] == 0).all()


@pytest.mark.parametrize("flow_cat", ["ac2g", "async_cpu_to_gpu"])
def test_flows_supply_missing_correlation(tmp_path, flow_cat):
    b = TraceBuilder()
    ext = b.op("aten::mul", 0, 100)
    b.launch(10.125, 5, "mul_kernel", 40.5, 3, ext=ext, args_correlation=False)
    corr = b._next_corr - 1
    b.raw({"ph": "s", "id": corr, "pid": b.pid, "tid": b.tid, "ts": 10.125, "cat": flow_cat, "name": flow_cat})
    b.raw({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": 40.5, "cat": flow_cat, "name": flow_cat, "bp": "e"})
    r = tracekit.load_trace(b.write(tmp_path / "f.json")).rank()
    assert r.gpu[tables.GPU_CORRELATION].iat[0] == corr
    assert r.gpu[tables.GPU_LAUNCH].iat[0] == 0 and r.gpu[tables.GPU_OP].iat[0] == 0


def test_time_containment_when_external_id_missing_or_inconsistent(tmp_path):
    b = TraceBuilder()
    b.op("aten::outer", 0, 100)
    inner = b.op("aten::inner", 10, 50)
    b.op("aten::other_thread", 0, 100, tid=999)
    b.launch(20, 5, "k_no_ext", 70, 2)  # no External id: containment on the launching thread
    b.launch(30, 5, "k_bad_ext", 80, 2, ext=inner + 100)  # ext id of nothing
    b.launch(80, 5, "k_outer", 90, 2, ext=inner)  # ext id says inner, but time says outer
    r = tracekit.load_trace(b.write(tmp_path / "c.json")).rank()
    names = dict(zip(r.gpu[tables.GPU_NAME], r.gpu[tables.GPU_OP], strict=True))
    op_names = r.ops[tables.OP_NAME]
    assert op_names.iat[names["k_no_ext"]] == "aten::inner"
    assert op_names.iat[names["k_bad_ext"]] == "aten::inner"
    assert op_names.iat[names["k_outer"]] == "aten::outer"


def test_ns_fractions_and_busy_union(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::add", 0, 100)
    b.launch(1.001, 1, "a", 10.0005, 2.0005, ext=ext)
    b.launch(2.002, 1, "b", 11.0, 3.0, ext=ext, stream=8)  # overlaps a on another stream
    b.launch(3.003, 1, "c", 20.25, 1.125, ext=ext)
    r = tracekit.load_trace(b.write(tmp_path / "ns.json")).rank()
    assert r.meta.origin_us == 10  # times are µs after the first timestamp's whole µs
    assert r.gpu[tables.GPU_TS].iat[0] == pytest.approx(0.0005)
    busy = busy_time_us(r.gpu[tables.GPU_TS].to_numpy(), r.gpu[tables.GPU_END].to_numpy())
    assert busy == pytest.approx((14.0 - 10.0005) + 1.125)


def test_cpu_only_trace_is_valid_and_says_so(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 10, **{"Input Dims": [[2, 2], [2, 2]]})
    t = tracekit.load_trace(b.write(tmp_path / "cpu.json"))
    assert not t.rank().has_gpu and t.rank().meta.platform == "cpu"
    assert t.rank().ops[tables.OP_INPUT_DIMS].iat[0] == [[2, 2], [2, 2]]
    assert any("CPU-only" in w for w in t.warnings)


def test_malformed_events_are_skipped_and_counted(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    b.raw({"ph": "X", "cat": "kernel", "name": "bad_ts", "ts": "yesterday", "dur": 1})
    b.raw("not an event")
    b.raw({"ph": "X", "cat": "kernel", "name": "no_ts", "dur": 1, "args": {}})
    t = tracekit.load_trace(b.write(tmp_path / "bad.json"))
    assert len(t.rank().kernels) == 1
    assert t.rank().skipped == 3
    assert any("skipped 3 malformed events" in w for w in t.warnings)


def test_device_properties_as_python_repr_string(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    b.top["deviceProperties"] = "[{'id': 0, 'name': 'Tesla V100-SXM2-32GB', 'numSms': 80}]"
    assert tracekit.load_trace(b.write(tmp_path / "s.json")).rank().meta.device_name == "Tesla V100-SXM2-32GB"


def test_directory_ranks_from_distributed_info_then_file_name(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for i, name in enumerate(["a.json", "b.json.gz"]):
        b = TraceBuilder()
        _one_gemm(b)
        b.top["distributedInfo"] = {"rank": 5 + i, "world_size": 8}
        b.write(d / name)
    b = TraceBuilder()
    _one_gemm(b)
    b.write(d / "trainer_rank-2.json")
    (d / "notes.txt").write_text("not a trace")
    t = tracekit.load_trace(d)
    assert sorted(t.ranks) == [2, 5, 6]
    assert (t.rank(5).meta.distributed or {}).get("world_size") == 8


def test_op_inputs_decoded_on_demand_for_ops_without_gpu_work(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    b.op("aten::empty", 2000, 1, **{"Input Dims": [[3, 4]], "Input type": ["float"]})
    r = tracekit.load_trace(b.write(tmp_path / "t.json")).rank()
    row = int((r.ops[tables.OP_NAME] == "aten::empty").to_numpy().nonzero()[0][0])
    assert r.ops[tables.OP_INPUT_DIMS].iat[row] is None
    assert r.op_inputs(row)[tables.OP_INPUT_DIMS] == [[3, 4]]


def test_inductor_op_keeps_its_extra_args(tmp_path):
    b = TraceBuilder()
    ext = b.op("triton_poi_fused_add_0", 0, 50, kernel_file="/tmp/x.py", grid="grid(100,)", num_warps=4,
               **{"Concrete Inputs": ["", "", "100"]})
    b.launch(10, 5, "triton_poi_fused_add_0", 30, 2, ext=ext, api="cuLaunchKernel", cat="cuda_driver")
    r = tracekit.load_trace(b.write(tmp_path / "i.json")).rank()
    extra = r.ops[tables.OP_EXTRA].iat[0]
    assert extra["kernel_file"] == "/tmp/x.py" and extra["num_warps"] == 4 and extra["grid"] == "grid(100,)"
    assert r.ops[tables.OP_CONCRETE_INPUTS].iat[0] == ["", "", "100"]


def test_document_round_trip_is_json(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    assert json.loads((b.write(tmp_path / "x.json")).read_text())["traceEvents"]


def test_epoch_timestamps_keep_their_nanoseconds(tmp_path):
    # float64 spaces numbers near 1.7e15 by 0.25: parsed naively, these gaps and ends would be off
    b = TraceBuilder()
    ext = b.op("aten::add", 0, 100)
    b.launch(1, 1, "a", 2, 4.928, ext=ext)
    b.launch(3, 1, "b", 4, 1.001, ext=ext)
    text = json.dumps(b.document())
    exact = {0: "1712195495505572.988", 1: "1712195495505577.988", 2: "1712195495505582.988",
             3: "1712195495505578.988", 4: "1712195495505588.417"}
    for small, big in exact.items():
        text = text.replace(f'"ts": {small},', f'"ts": {big},')
    path = tmp_path / "epoch.json"
    path.write_text(text)
    r = tracekit.load_trace(path).rank()
    ts, end = r.gpu[tables.GPU_TS].to_numpy(), r.gpu[tables.GPU_END].to_numpy()
    assert ts[1] - end[0] == pytest.approx(0.501, abs=1e-6)
    assert busy_time_us(ts, end) == pytest.approx(4.928 + 1.001, abs=1e-6)
    assert r.meta.origin_us == 1712195495505582  # the first GPU timestamp's whole µs


def test_tolerant_path_keeps_shapes_of_valid_events(tmp_path):
    b = TraceBuilder()
    _one_gemm(b)
    b.raw({"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "pid": 100, "tid": 100, "ts": 5,
           "dur": 1, "args": {"correlation": "not a number"}})  # sends the chunk down the slow path
    r = tracekit.load_trace(b.write(tmp_path / "t.json")).rank()
    row = int(r.gpu[tables.GPU_OP].iat[0])
    assert r.ops[tables.OP_INPUT_DIMS].iat[row] == [[64], [64, 128], [128, 64]]
    assert r.runtime[tables.RT_CORRELATION].tolist().count(-1) == 1


def test_rocm_string_byte_counts(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::copy_", 0, 100)
    b.launch(5, 10, "Memcpy HtoD", 20, 30, ext=ext, api="hipMemcpyWithStream", kind="memcpy", bytes="4096")
    r = tracekit.load_trace(b.write(tmp_path / "m.json")).rank()
    assert r.gpu[tables.GPU_BYTES].iat[0] == 4096 and r.skipped == 0


def test_store_knows_whether_any_shapes_were_recorded(tmp_path):
    b = TraceBuilder()
    ext = b.op("aten::mm", 0, 50)
    b.launch(5, 5, "gemm", 20, 10, ext=ext)
    r = tracekit.load_trace(b.write(tmp_path / "noshapes.json")).rank()
    assert not r.op_input_store.has_values(tables.OP_INPUT_DIMS)
    b.op("aten::empty", 100, 1, **{"Input Dims": [[3]]})
    r = tracekit.load_trace(b.write(tmp_path / "shapes.json")).rank()
    assert r.op_input_store.has_values(tables.OP_INPUT_DIMS)
    assert not r.op_input_store.has_values(tables.OP_INPUT_STRIDES)
