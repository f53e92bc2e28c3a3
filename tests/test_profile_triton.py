"""Triton launch metadata, through Triton's interpreter (TRITON_INTERPRET=1) on the CPU."""

from __future__ import annotations

import gzip
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from tracekit.profile import profile, triton_meta  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "tests" / "data" / "profile" / "triton_kernels.py"


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`tracekit profile triton_kernels.py 2` with TRITON_INTERPRET=1 from the process start."""
    work = tmp_path_factory.mktemp("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "profile", "--no-report", str(KERNELS), "2"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "triton kernels ok" in res.stdout
    assert "(no steps marked, 6 Triton launches)" in res.stderr
    return load(work / "triton_kernels.trace.json.gz")


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch) -> dict:
    """The fixture's kernels decorated in this process under the interpreter. Only kernels that
    call no tl.* jit function (add_kernel) work this way: tl's were built before the env was set."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = runpy.run_path(str(KERNELS))
    assert isinstance(module["add_kernel"], InterpretedFunction)
    return module


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def launches(doc: dict, name: str) -> list[dict]:
    return [e["args"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == name]


def by_name(doc: dict, args: dict) -> dict:
    """One launch's inputs keyed by parameter name, via the trace's kernel table."""
    table = doc["tracekit"]["triton_kernels"][args["tracekit_user_kernel"] - 1]
    cols = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
    return {
        name: tuple(args[c][i] for c in cols) for i, name in enumerate(table["arg_names"])
    }


def test_vector_add_and_matmul_launch_metadata(interpreted: dict) -> None:
    doc = interpreted
    meta = doc["tracekit"]
    assert meta["triton_metadata"] == "cpu_op" and meta["triton_launches_wrapped"] == 6
    table = {k["name"]: k for k in meta["triton_kernels"]}
    assert table["add_kernel"]["arg_names"] == ["x_ptr", "y_ptr", "out_ptr", "n_elements", "BLOCK_SIZE"]
    assert table["add_kernel"]["constexpr_names"] == ["BLOCK_SIZE"]
    assert table["matmul_kernel"]["constexpr_names"] == ["BLOCK_M", "BLOCK_N", "BLOCK_K"]
    assert table["add_kernel"]["file"] == str(KERNELS)
    # the fixture's source: matmul_kernel calls tl.dot, the other two do not
    assert {k: v["uses_dot"] for k, v in table.items()} == {"add_kernel": False, "matmul_kernel": True,
                                                            "scale_kernel": False}

    adds = launches(doc, "add_kernel")
    assert len(adds) == 2
    add = adds[0]
    assert (add["kernel_backend"], add["grid"]) == ("triton", "[4, 1, 1]")  # cdiv(1000, 256)
    assert "num_warps" not in add  # the interpreter has no default: only what the launch passed
    assert by_name(doc, add) == {
        "x_ptr": ([1000], "float", [1], ""),
        "y_ptr": ([1000], "float", [1], ""),
        "out_ptr": ([1000], "float", [1], ""),
        "n_elements": ([], "Scalar", [], "1000"),
        "BLOCK_SIZE": ([], "Scalar", [], "256"),
    }

    mms = launches(doc, "matmul_kernel")
    assert len(mms) == 2
    mm = mms[1]
    assert (mm["grid"], mm["num_warps"], mm["num_stages"]) == ("[2, 2, 1]", 2, 1)
    assert "constexprs" not in mm  # all constexprs are numbers: Concrete Inputs has them
    args = by_name(doc, mm)
    assert args["a_ptr"] == ([32, 48], "float", [48, 1], "")
    assert args["b_ptr"] == ([48, 64], "float", [1, 48], "")
    assert args["c_ptr"] == ([32, 64], "float", [64, 1], "")
    assert [args[k][3] for k in ("M", "N", "K", "stride_bk", "stride_bn")] == ["32", "64", "48", "1", "48"]
    assert [args[k][3] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")] == ["16", "32", "16"]
    # every wrapped launch is one cpu_op (the 6th is scale_kernel's)
    assert len(adds) + len(mms) + len(launches(doc, "scale_kernel")) == meta["triton_launches_wrapped"]


def test_dtype_constexpr_and_half_inputs(interpreted: dict) -> None:
    doc = interpreted
    launch = launches(doc, "scale_kernel")[0]
    assert launch["constexprs"] == "BLOCK=64,OUT_DTYPE=fp32"
    assert launch["grid"] == "[16, 1, 1]"  # cdiv(1000, 64)
    args = by_name(doc, launch)
    assert args["x_ptr"] == ([1000], "c10::Half", [1], "")
    assert args["out_ptr"] == ([1000], "float", [1], "")
    assert args["scale"] == ([], "Scalar", [], "0.5")
    assert args["OUT_DTYPE"] == ([], "", [], "")  # not a number: see "constexprs"


def test_launchers_are_restored_after_profiling(kernels: dict, tmp_path: Path) -> None:
    before = (JITFunction.__dict__["run"], InterpretedFunction.__dict__["run"])
    with profile(tmp_path / "r.json.gz", report=False):
        assert InterpretedFunction.__dict__["run"].__wrapped__ is before[1]
        assert JITFunction.__dict__["run"].__wrapped__ is before[0]
    assert (JITFunction.__dict__["run"], InterpretedFunction.__dict__["run"]) == before
    x = torch.ones(10)
    with profile(tmp_path / "none.json.gz", report=False, force=True):
        pass
    kernels["add"](x, x)  # launched after profiling: not recorded anywhere, still correct
    assert torch.equal(kernels["add"](x, x), 2 * x)


def test_fallback_lists_launches_at_top_level(
    kernels: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(triton_meta, "_accepts_kwargs", lambda fast: False)  # as on torch < 2.4
    x = torch.arange(8, dtype=torch.float32)
    out = tmp_path / "fallback.json.gz"
    with profile(out, report=False):
        kernels["add"](x, x)
    doc = load(out)
    meta = doc["tracekit"]
    assert meta["triton_metadata"] == "top_level"
    (launch,) = meta["triton_launches"]
    assert launch["name"] == "add_kernel" and launch["seq"] == 0
    assert launch["grid"] == [1, 1, 1] and launch["constexprs"] == {"BLOCK_SIZE": 256}
    assert launch["args"][0] == {"name": "x_ptr", "shape": [8], "dtype": "float32", "strides": [1]}
    assert launch["args"][3] == {"name": "n_elements", "value": 8}
    annotations = [e for e in doc["traceEvents"] if e.get("name") == "add_kernel"]
    assert [e["cat"] for e in annotations] == ["user_annotation"]


def test_profile_callable_records_each_kernel_launch_as_a_step(
    kernels: dict, tmp_path: Path
) -> None:
    from tracekit.profile import profile_callable

    x = torch.randn(300)
    result = profile_callable(kernels["add"], x, x, warmup=2, iters=3,
                              output=tmp_path / "k.json.gz", report=False)  # fmt: skip
    assert (result.steps, result.triton_launches) == (3, 3)  # the warm-up launches are not wrapped
    doc = load(result.trace_path)
    steps = [e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    adds = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "add_kernel"]
    assert len(steps) == len(adds) == 3
    for step, add in zip(sorted(steps, key=lambda e: e["ts"]), adds, strict=True):
        assert step["ts"] <= add["ts"] and add["ts"] + add["dur"] <= step["ts"] + step["dur"]
        assert add["args"]["grid"] == "[2, 1, 1]" and add["args"]["Input Dims"][0] == [300]
