"""tracekit profile --try: knob adapters, the timed session, step selection, and one CPU end-to-end run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tracekit_in_process

torch = pytest.importorskip("torch")

from tracekit.profile import knobs as KN  # noqa: E402
from tracekit.profile.runner import Target  # noqa: E402
from tracekit.profile.script import run_target  # noqa: E402
from tracekit.profile.timed import StepClock, TimedSession  # noqa: E402
from tracekit.profile.tryrun import _prediction, _timed_mean, output_paths  # noqa: E402
from tracekit.suggestions.model import Suggestion  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "sample_traces" / "scripts" / "train_try.py"


def test_parse_knobs() -> None:
    assert KN.parse_knobs("tf32, compile,tf32") == ["tf32", "compile"]
    with pytest.raises(ValueError, match="unknown knob 'tf16'"):
        KN.parse_knobs("tf32,tf16")
    with pytest.raises(ValueError):
        KN.parse_knobs(" , ")
    for name in ("tf32", "bf16", "dataloader", "cudnn_benchmark", "compile", "cudagraphs"):
        assert KN.KNOBS[name].does


def test_output_paths(tmp_path: Path) -> None:
    paths = output_paths(tmp_path / "run.trace.json.gz", ["tf32", "compile"])
    assert paths[None].name == "run.trace.json.gz"
    assert paths["tf32"].name == "run.try-tf32.trace.json.gz"
    assert paths["compile"].name == "run.try-compile.trace.json.gz"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only skip")
@pytest.mark.parametrize("name", ["tf32", "bf16", "cudnn_benchmark", "cudagraphs"])
def test_cuda_knobs_say_why_on_cpu(name: str) -> None:
    applied = KN.apply_knob(name, torch)
    assert not applied.ok and "needs CUDA" in applied.reason


def test_dataloader_defaults_only_where_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    loader_cls = torch.utils.data.DataLoader
    monkeypatch.setattr(loader_cls, "__init__", loader_cls.__init__)  # restored after the test
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    applied = KN.apply_knob("dataloader", torch)
    data = list(range(8))
    default = loader_cls(data, batch_size=2)
    assert default.num_workers == 2  # min(8, 4 // 2)
    assert default.persistent_workers is True
    assert default.pin_memory is torch.cuda.is_available()
    explicit = loader_cls(data, 2, num_workers=0)  # the script said 0: kept, so no persistent workers
    assert explicit.num_workers == 0 and explicit.persistent_workers is False
    assert any("num_workers=2" in n for n in applied.notes)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

    def forward(self, x):
        return self.body(x)


def test_model_roots_are_the_outermost_trained_modules() -> None:
    model, loss = Net(), torch.nn.MSELoss()
    other = torch.nn.Linear(3, 3)  # not trained by the optimizer
    params = {id(p) for p in model.parameters()}
    roots = KN.model_roots(params)
    assert model in roots and loss not in roots and other not in roots
    assert model.body not in roots  # a child, not a root


def test_compile_knob_compiles_the_model_when_the_optimizer_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    optimizer_cls = torch.optim.Optimizer
    monkeypatch.setattr(optimizer_cls, "__init__", optimizer_cls.__init__)
    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: calls.append((type(self), kw)))
    applied = KN.apply_knob("compile", torch)
    assert applied.ok and not applied.notes  # nothing to compile before an optimizer exists
    model = Net()
    torch.optim.SGD(model.parameters(), lr=0.1)
    assert calls == [(Net, {})]
    assert applied.notes == ["torch.compile(Net)"]


def _fired(rule_id: str, per_step_us: float) -> Suggestion:
    return Suggestion(id=rule_id, title=rule_id, saving_us=2 * per_step_us, saving_pct=1.0, formula="",
                      snippet="", evidence=({"n": 1},), per_step_us=per_step_us)


def test_prediction_comes_from_the_rule_rows() -> None:
    """A knob answers the rows that name it: the fired one with the largest per-step saving, else its
    first row (RULES order) with no prediction."""
    both = [_fired("avoid_sync", 50.0), _fired("pinned_memory", 5.0), _fired("dataloader_workers", 3.0)]
    assert _prediction("dataloader", both) == ("pinned_memory", 5.0)  # avoid_sync is no knob's
    assert _prediction("dataloader", both[2:]) == ("dataloader_workers", 3.0)
    assert _prediction("dataloader", both[:1]) == ("dataloader_workers", None)
    assert _prediction("bf16", [_fired("lower_precision", 7.5)]) == ("lower_precision", 7.5)
    assert _prediction("cudnn_benchmark", both) == (None, None)


def test_timed_mean_uses_the_given_steps() -> None:
    # boundaries of steps 0..4 (step k = bounds[k] -> bounds[k+1]); steps 1-3 last 10, 20, 30 µs
    timing = {"wall_us": [0.0, 100.0, 110.0, 130.0, 160.0, 161.0], "gpu_us": []}
    assert _timed_mean(timing, [1, 2, 3]) == (pytest.approx(20.0), "wall")
    assert _timed_mean(timing, [2]) == (pytest.approx(20.0), "wall")
    # no steps marked (trace scope, step -1): every step but the first and the last
    assert _timed_mean(timing, [-1]) == (pytest.approx(20.0), "wall")
    timing["gpu_us"] = [0.0, 50.0, 60.0, 70.0, 80.0, 90.0]
    assert _timed_mean(timing, [1, 2, 3]) == (pytest.approx(10.0), "gpu")
    assert StepClock((0.0, 5.0, 9.0), ()).durations("wall") == [5.0, 4.0]


def test_timed_session_marks_the_same_steps_as_the_profiler(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(5):\n"
        "    m(torch.ones(1, 2)).sum().backward()\n"
        "    opt.step()\n")
    session = TimedSession()
    session.start()
    status = run_target(Target(script=str(script)), session)
    assert status == 0
    assert session.marks == 5 and session.step_source == "optimizer"
    clock = session.clock
    assert clock is not None and len(clock.wall_us) == 5 + 2  # steps 0..5 and the end
    assert all(d >= 0 for d in clock.durations("wall"))


def test_try_end_to_end_on_cpu(tmp_path: Path) -> None:
    base = tmp_path / "run.trace.json.gz"
    cmd = [sys.executable, "-m", "tracekit", "profile", "--try", "dataloader,tf32", "-q", "-o", str(base),
           str(TRAIN), "--steps", "5", "--work", "5"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), check=False,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((tmp_path / "run.try.json").read_text())
    assert doc["schema"] == "tracekit.try/1"
    rows = {r["knob"]: r for r in doc["rows"]}
    assert rows["baseline"]["status"] == "ok" and rows["baseline"]["profiled_speedup"] == 1.0
    assert rows["baseline"]["unprofiled_us_per_step"] > 0 and rows["baseline"]["steps"] >= 1
    dl = rows["dataloader"]
    assert dl["status"] == "ok" and "num_workers" in dl["reason"] and dl["answers"] == "dataloader_workers"
    assert (tmp_path / "run.try-dataloader.trace.json.gz").exists()
    assert dl["diff_command"].startswith("tracekit diff ")
    if not torch.cuda.is_available():
        assert rows["tf32"]["status"] == "skipped" and "needs CUDA" in rows["tf32"]["reason"]
    assert "tracekit diff" in out.stdout and "dataloader" in out.stdout
    again = tracekit_in_process(*cmd[3:])  # the same command line, in this process: refused before it runs
    assert again.returncode == 2 and "exists" in again.stderr  # no --force: nothing overwritten
