"""Units of tracekit.profile: trace export, exit statuses, schedules, Triton argument capture."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tracekit.errors import OutputError, ProfileError
from tracekit.profile.export import report_path_for, write_trace
from tracekit.profile.record import default_output
from tracekit.profile.runner import INTERRUPTED, exit_status
from tracekit.profile.session import ProfileOptions


class FakeProfiler:
    """Stands in for torch.profiler.profile: export_chrome_trace writes the given document."""

    def __init__(self, doc: Any = None, text: str | None = None, fail: bool = False) -> None:
        self.text = text if text is not None else json.dumps(doc, indent=2)
        self.fail = fail

    def export_chrome_trace(self, path: str) -> None:
        if self.fail:
            raise RuntimeError("kineto said no")
        Path(path).write_text(self.text)


def kineto_doc(events: list[dict], **top: Any) -> dict:
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events,
            "traceName": "/tmp/.x.123.raw.json", **top}  # fmt: skip


def read(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


STEP0 = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 1.0, "dur": 9.0}
STEP0_GPU = {**STEP0, "cat": "gpu_user_annotation"}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2.0, "dur": 1.5,
      "args": {"Input Dims": [[2, 3], [3, 4]]}}  # fmt: skip


def test_trace_gets_metadata_first_and_its_own_name(tmp_path: Path) -> None:
    out = tmp_path / "run.trace.json.gz"
    doc = kineto_doc([STEP0, OP])
    write_trace(FakeProfiler(doc), out, {"version": "x", "steps": [1, 2]}, )
    got = read(out)
    assert next(iter(got)) == "tracekit"
    assert got["tracekit"] == {"version": "x", "steps": [1, 2]}
    assert got["traceEvents"] == [STEP0, OP]  # untouched when steps were marked
    assert got["traceName"] == "run.trace.json.gz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.trace.json.gz"]


def test_plain_json_when_the_name_has_no_gz(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    write_trace(FakeProfiler(kineto_doc([OP])), out, {}, )
    assert json.loads(out.read_text())["traceEvents"] == [OP]


def test_large_trace_is_streamed_intact(tmp_path: Path) -> None:
    events = [{**OP, "ts": float(i), "name": f"op{i}"} for i in range(20000)]  # ~2.5 MB of JSON
    fake = FakeProfiler(kineto_doc(events))
    assert len(fake.text) > (1 << 20) + 4096
    out = tmp_path / "big.trace.json.gz"
    write_trace(fake, out, {"k": 1}, )
    got = read(out)
    assert got["traceEvents"] == events and got["traceName"] == "big.trace.json.gz"


def test_whole_run_step0_is_dropped_when_nothing_was_marked(tmp_path: Path) -> None:
    out = tmp_path / "nosteps.trace.json.gz"
    other = {**STEP0, "name": "ProfilerStep#0", "cat": "cpu_op"}  # not an annotation: kept
    doc = kineto_doc([STEP0, OP, STEP0_GPU, other])
    write_trace(FakeProfiler(doc), out, {"steps_recorded": 0}, drop_steps=frozenset({0}))
    got = read(out)
    assert got["traceEvents"] == [OP, other]
    assert next(iter(got)) == "tracekit" and got["traceName"] == "nosteps.trace.json.gz"


def test_export_failures_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="could not export the trace: kineto said no"):
        write_trace(FakeProfiler(fail=True), tmp_path / "a.json.gz", {}, )
    with pytest.raises(ProfileError, match="not a JSON object"):
        write_trace(FakeProfiler(text="[1, 2]"), tmp_path / "b.json.gz", {}, )
    with pytest.raises(OutputError, match="cannot write the trace"):
        write_trace(FakeProfiler(kineto_doc([])), tmp_path / "no" / "c.json", {}, )
    assert list(tmp_path.iterdir()) == []  # temp files cleaned up


@pytest.mark.parametrize(
    ("name", "report"),
    [("a.trace.json.gz", "a.report.html"), ("a.json.gz", "a.report.html"), ("a.json", "a.report.html"),
     ("a.gz", "a.report.html"), ("trace", "trace.report.html"), (".json", ".json.report.html"),
     ("a.pt.trace.json.gz", "a.report.html")],
)  # fmt: skip
def test_report_sits_beside_the_trace(name: str, report: str) -> None:
    assert report_path_for(Path("/d") / name) == Path("/d") / report


def test_default_output_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_output("train", unique=False) == tmp_path / "train.trace.json.gz"
    assert default_output("pkg.mod", unique=False).name == "pkg.mod.trace.json.gz"
    assert default_output("<lambda>", unique=False).name == "_lambda_.trace.json.gz"
    first = default_output("f", unique=True)
    first.write_text("")
    assert default_output("f", unique=True) != first


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (None, 0),
        (SystemExit(), 0),
        (SystemExit(0), 0),
        (SystemExit(4), 4),
        (SystemExit(256 + 7), 7),
        (SystemExit(-1), 255),
        (SystemExit("message"), 1),
        (KeyboardInterrupt(), INTERRUPTED),
        (ValueError("x"), 1),
    ],
)
def test_exit_status_matches_python(exc: BaseException | None, status: int) -> None:
    assert exit_status(exc) == status


@pytest.mark.parametrize(
    ("warmup", "active", "recorded"),
    [(0, None, [0, 1, 2, 3, 4, 5]), (2, None, [2, 3, 4, 5]), (1, 2, [1, 2]), (0, 1, [0])],
)
def test_schedule_window(warmup: int, active: int | None, recorded: list[int]) -> None:
    options = ProfileOptions(warmup=warmup, active=active)
    assert [s for s in range(6) if options.recorded(s)] == recorded


def test_schedule_actions_match_torch_schedule() -> None:
    pytest.importorskip("torch")
    from torch.profiler import ProfilerAction, schedule

    from tracekit.profile.session import _Schedule

    ours = _Schedule(ProfileOptions(warmup=2, active=3), ProfilerAction)
    theirs = schedule(wait=0, warmup=2, active=3, repeat=1)
    assert [ours(s) for s in range(8)] == [theirs(s) for s in range(8)]
    rest = _Schedule(ProfileOptions(warmup=1), ProfilerAction)
    assert [rest(s) for s in range(4)] == [ProfilerAction.WARMUP] + [ProfilerAction.RECORD] * 3


class FakeKernel:
    """Looks like a JITFunction to the recorder: the Python function is `.fn`."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


def _kernel(source: str, filename: str = "/home/me/kernels.py") -> FakeKernel:
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), namespace)
    return FakeKernel(namespace["k"])


KERNEL_SRC = "def k(x_ptr, n, scale, BLOCK: 'tl.constexpr' = 128, FLAG: 'tl.constexpr' = None): pass"


@pytest.fixture
def recorder() -> Any:
    torch = pytest.importorskip("torch")
    from tracekit.profile.triton_meta import TritonRecorder

    return TritonRecorder(torch)


def test_recorder_binds_args_defaults_and_sanitizes(recorder: Any) -> None:
    import torch

    calls: list[tuple[tuple, dict]] = []

    def original(fn: Any, *args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "launched"

    run = recorder._wrap(original)
    kernel = _kernel(KERNEL_SRC)
    x = torch.ones(4, 2).t()
    grids: list[dict] = []

    def grid(meta: dict) -> tuple[int]:
        grids.append(meta)
        return (meta["n"] // meta["BLOCK"],)

    assert run(kernel, x, 2**64 - 1, 0.5, grid=grid, warmup=False, num_warps=8) == "launched"
    assert grids == [{"x_ptr": x, "n": 2**64 - 1, "scale": 0.5, "BLOCK": 128, "FLAG": None}]
    (args, kwargs), = calls
    assert args == (x, 2**64 - 1, 0.5)
    assert kwargs["grid"] == ((2**64 - 1) // 128,)  # Triton gets the evaluated grid, not the callable
    rec_args, extra = recorder._describe(recorder._infos[id(kernel)], (x, 7, 0.5), {"grid": (3, 2)})
    assert rec_args == [x, 7, 0.5, 128, None]
    assert extra == {"kernel_backend": "triton", "tracekit_user_kernel": 1, "grid": "[3, 2, 1]",
                     "constexprs": "BLOCK=128,FLAG=None"}  # fmt: skip
    big, _ = recorder._describe(recorder._infos[id(kernel)], (object(), 2**63, 1), {"grid": [1]})
    assert big[:3] == [None, None, 1]  # no int64 overflow, no arbitrary objects for the profiler
    assert recorder.launches == 1 and recorder.kernels[0]["constexpr_names"] == ["BLOCK", "FLAG"]


def test_recorder_passes_through_inductor_kernels_and_warmups(recorder: Any) -> None:
    seen: list[dict] = []
    run = recorder._wrap(lambda fn, *a, **k: seen.append(k))
    inductor = _kernel(KERNEL_SRC, "/tmp/torchinductor_root/ab/cabcdef.py")
    run(inductor, 1, 2, 3, grid=lambda meta: (1,), warmup=False)
    assert callable(seen[-1]["grid"])  # untouched
    user = _kernel(KERNEL_SRC)
    run(user, 1, 2, 3, grid=(1,), warmup=True)
    assert recorder.launches == 0 and recorder.kernels == []


def test_recorder_options_and_failures_never_break_a_launch(recorder: Any) -> None:
    run = recorder._wrap(lambda fn, *a, **k: "ok")
    kernel = _kernel(KERNEL_SRC)
    info = recorder._new_info(kernel)
    _, extra = recorder._describe(info, (1, 2, 3), {"grid": (1,), "num_stages": 2, "num_ctas": 1})
    assert (extra["num_stages"], extra["num_ctas"]) == (2, 1)

    def bad_grid(meta: dict) -> tuple[int]:
        raise KeyError("missing")

    # the grid fails for tracekit too: the launch goes ahead unrecorded, Triton reports the error
    assert run(kernel, 1, 2, 3, grid=bad_grid, warmup=False) == "ok"
    assert run(FakeKernel(None), 1, grid=(1,), warmup=False) == "ok"  # no Python function
    assert run(object(), 1, grid=(1,), warmup=False) == "ok"
    assert recorder.launches == 0


def test_safe_text_keeps_kineto_json_valid() -> None:
    from tracekit.profile.triton_meta import safe_text

    assert safe_text('C:\\dir\\"k".py\n') == "C:/dir/'k'.py "
