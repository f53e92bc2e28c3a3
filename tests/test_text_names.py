"""Text output shows HIP/Itanium-mangled kernel names demangled."""

from __future__ import annotations

from tracebuilder import TraceBuilder

from tracekit.cli import main

MANGLED = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16EEvPT_"


def test_mangled_kernel_names_are_demangled_in_text(tmp_path, capsys):
    b = TraceBuilder()
    b.launch(0.0, 5.0, MANGLED, 10.0, 100.0, api="hipLaunchKernel")
    assert main(["analyze", str(b.write(tmp_path / "hip.json"))]) == 0
    out = capsys.readouterr().out
    # the kernel table shows the demangled name shortened (report/names.py short_name: no namespaces,
    # template arguments or parameters): sgl_hip::activation::act_and_mul_kernel<…>(…) -> act_and_mul_kernel
    row = next(line for line in out.splitlines() if "act_and_mul_kernel" in line)
    assert "act_and_mul_kernel" in row.split()
    assert MANGLED[:40] not in out and "_ZN" not in out
