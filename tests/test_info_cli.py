"""`tracekit info --json`: the documented keys and their values on a synthetic trace."""

from __future__ import annotations

import json

from tracebuilder import TraceBuilder

from tracekit.cli import main

KEYS = {"schema", "ranks", "device", "events", "kernels", "memcpy", "memset", "cpu_ops", "launches",
        "kernels_linked_to_launch", "kernels_linked_to_op", "gpu_busy_us", "span_us", "steps"}


def test_info_json_numbers(tmp_path, capsys):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.annotation("ProfilerStep#1", 100, 100)
    ext = b.op("aten::mm", 10, 50)
    b.launch(15, 5, "gemm", 30, 20, ext=ext)
    b.launch(25, 5, "gemm", 45, 20, ext=ext, stream=9)  # overlaps: busy is the union 30..65
    b.launch(110, 5, "Memcpy DtoH", 120, 5, api="cudaMemcpyAsync", kind="memcpy", bytes=8)
    b.launch(130, 2, "orphan_kernel", 140, 10)  # no op encloses it
    assert main(["info", "--json", str(b.write(tmp_path / "t.json"))]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info) >= KEYS
    assert info["schema"] == "tracekit.info/1"
    assert (info["kernels"], info["memcpy"], info["memset"], info["launches"]) == (3, 1, 0, 4)
    assert (info["kernels_linked_to_launch"], info["kernels_linked_to_op"]) == (3, 2)
    assert info["gpu_busy_us"] == 35 + 5 + 10
    assert info["span_us"] == 200 and info["steps"] == 2 and info["ranks"] == [0]
    # one device name for every command: the device table's, with the memory the trace reports (150e9 B)
    assert info["device"] == "NVIDIA H200 SXM 141GB (150 GB reported)"


def test_info_text_is_one_screen(tmp_path, capsys):
    b = TraceBuilder()
    ext = b.op("aten::mm", 10, 50)
    b.launch(15, 5, "gemm_<script>", 30, 20, ext=ext)
    assert main(["info", str(b.write(tmp_path / "t.json"))]) == 0
    out = capsys.readouterr().out
    assert "1 kernel," in out and "GPU busy 20.0 µs" in out and len(out.splitlines()) < 40
    assert "gemm_<script>" in out  # not a C++ signature: the name as recorded
