"""The operator view: time by aten op, by nn.Module and by source line, on a hand-built trace."""

from __future__ import annotations

import json

import pytest
from tracebuilder import TraceBuilder

import tracekit
from tracekit.analyzers.operators import BY_LINE, BY_MODULE, BY_OP, operator_views, source_line
from tracekit.cli import main


def frame(b: TraceBuilder, name: str, ts: float, dur: float) -> None:
    b.raw({"ph": "X", "cat": "python_function", "name": name, "pid": b.pid, "tid": b.tid, "ts": ts, "dur": dur,
           "args": {"Python id": len(b.events)}})


def stacked_trace(tmp_path, steps: int = 1, backward: bool = False):
    """Per 100 µs step from t0: Python frames nn.Module: Net_0 [0, 90], model.py(10): forward [1, 90],
    nn.Module: Linear_0 [2, 40], torch/nn/modules/linear.py(124): forward [3, 39] (library code),
    model.py(12): forward [44, 56]. Ops: aten::linear [4, 34] around aten::addmm [5, 25], whose 3 µs
    launch at 6 runs a 20 µs gemm at 50; aten::relu [45, 55] launches a 5 µs kernel at 75. `backward`:
    also the same gemm kernel, 60 µs at 81, launched at 60 from another thread with no Python frames
    (as the autograd thread launches the backward pass)."""
    b = TraceBuilder()
    for s in range(steps):
        t = 100.0 * s
        b.annotation(f"ProfilerStep#{s}", t, 100.0)
        frame(b, "nn.Module: Net_0", t, 90)
        frame(b, "model.py(10): forward", t + 1, 89)
        frame(b, "nn.Module: Linear_0", t + 2, 38)
        frame(b, "torch/nn/modules/linear.py(124): forward", t + 3, 36)
        frame(b, "model.py(12): forward", t + 44, 12)
        b.op("aten::linear", t + 4, 30)
        mm = b.op("aten::addmm", t + 5, 20)
        b.launch(t + 6, 3, "sm90_xmma_gemm_bf16bf16_bf16f32", t + 50, 20.0, ext=mm)
        relu = b.op("aten::relu", t + 45, 10)
        b.launch(t + 46, 3, "void at::native::vectorized_elementwise_kernel<4, relu>(int)", t + 75, 5.0, ext=relu)
        if backward:
            b.launch(t + 60, 3, "sm90_xmma_gemm_bf16bf16_bf16f32", t + 81, 60.0, tid=b.tid + 1)
    return b.write(tmp_path / "stacked.json")


def _rows(view):
    return {r.key: r for r in view.rows}


def test_by_op_module_and_line(tmp_path):
    rank = tracekit.load_trace(stacked_trace(tmp_path)).rank()
    assert len(rank.python) == 5
    views = {v.by: v for v in operator_views(rank)}
    ops = _rows(views[BY_OP])
    # aten::linear holds the gemm launched by the addmm inside it; self CPU = 30 - 20 (its addmm)
    lin, mm, relu = ops["aten::linear"], ops["aten::addmm"], ops["aten::relu"]
    assert (lin.gpu_us, lin.launches, lin.cpu_total_us, lin.cpu_self_us, lin.calls) == (20.0, 1, 30.0, 10.0, 1)
    assert (mm.gpu_us, mm.cpu_self_us) == (20.0, 20.0) and (relu.gpu_us, relu.cpu_total_us) == (5.0, 10.0)
    assert views[BY_OP].attributed_gpu_us == 25.0 and views[BY_OP].gpu_total_us == 25.0
    mods = _rows(views[BY_MODULE])
    # inclusive: Net_0 holds both kernels; its self CPU is 90 less Linear_0's 38
    assert (mods["Net_0"].gpu_us, mods["Net_0"].launches, mods["Net_0"].cpu_self_us) == (25.0, 2, 52.0)
    assert (mods["Linear_0"].gpu_us, mods["Linear_0"].launches) == (20.0, 1)
    lines = _rows(views[BY_LINE])
    # the innermost frame of user code: the gemm's launch is under library code under model.py:10
    assert lines["model.py:10 forward"].gpu_us == 20.0 and lines["model.py:12 forward"].gpu_us == 5.0
    assert "torch/nn/modules/linear.py:124 forward" not in lines
    assert [r.gpu_us for r in views[BY_OP].rows][:3] == [20.0, 20.0, 5.0]  # largest GPU time first


def test_source_line_names():
    assert source_line("model.py(88): attention") == "model.py:88 attention"
    assert source_line("/home/u/proj/train.py(7): <module>") == "/home/u/proj/train.py:7 <module>"
    for library in ("torch/nn/modules/module.py(1755): _call_impl", "threading.py(1032): _bootstrap",
                    "/usr/lib/python3.11/site-packages/x.py(3): f", "<built-in method view of Tensor object at 0x1>"):
        assert source_line(library) is None


def test_without_stacks_says_what_is_missing(tmp_path):
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", 0, 100)
    b.launch(1, 3, "k", 5, 2.0, ext=b.op("aten::relu", 0, 5))
    views = {v.by: v for v in operator_views(tracekit.load_trace(b.write(tmp_path / "t.json")).rank())}
    assert views[BY_MODULE].rows == () and "nn.Module names" in views[BY_MODULE].missing
    assert views[BY_LINE].rows == () and "with_stack=True" in views[BY_LINE].missing
    assert _rows(views[BY_OP])["aten::relu"].gpu_us == 2.0


@pytest.mark.parametrize("by", ["op", "module", "line"])
def test_cli_by(tmp_path, capsys, by):
    path = str(stacked_trace(tmp_path, steps=4))
    assert main(["analyze", path, "--steps", "all", "--by", by]) == 0
    text = capsys.readouterr().out
    key = {"op": "aten::linear", "module": "Linear_0", "line": "model.py:10 forward"}[by]
    row = next(line for line in text.splitlines() if line.endswith(key))
    # 4 steps: 4 × 20 µs of gemm under it, 4 calls, 4 launches (times are two tokens: '80.0 µs')
    tokens = row.split()
    assert tokens[:2] == ["80.0", "µs"] and tokens[6:8] == ["4", "4"]
    assert main(["analyze", path, "--steps", "all", "--json", "--by", by]) == 0
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["operators"]
    (g,) = entry["groupings"]
    assert g["by"] == by and next(r for r in g["rows"] if r["key"] == key)["gpu_us"] == 80.0


def test_suggestions_point_at_the_line_that_launched_their_kernels(tmp_path):
    from tracekit.analyzers.analysis import analyze
    from tracekit.suggestions.model import Suggestion
    from tracekit.suggestions.rules import located

    a = analyze(tracekit.load_trace(stacked_trace(tmp_path, steps=4)), steps="all")

    def where(**row):
        s = Suggestion(id="x", title="t", saving_us=1.0, saving_pct=1.0, formula="f", snippet="", evidence=(row,))
        return located(a, s).where

    # the gemm is launched under model.py:10 (the torch frame between is library code); relu under model.py:12
    # and the innermost nn.Module class around them: Linear (Linear_0) for the gemm, Net (Net_0) for relu
    assert where(kernel="sm90_xmma_gemm_bf16bf16_bf16f32") == \
        "model.py:10 forward launches 100 % of the GPU time of these kernels; module Linear: 100 %"
    assert where(ops="aten::relu") == "model.py:12 forward launches 100 % of the GPU time of these ops; module Net: 100 %"
    assert where(kernel="not_in_this_trace") == ""
    # with the backward gemm (60 µs a step, under no frame) model.py:10 launches 20 of the 80 µs of
    # gemm time a step: the share is of all of it, not of the part placed on a line
    b = analyze(tracekit.load_trace(stacked_trace(tmp_path, steps=4, backward=True)), steps="all")
    s = Suggestion(id="x", title="t", saving_us=1.0, saving_pct=1.0, formula="f", snippet="",
                   evidence=({"kernel": "sm90_xmma_gemm_bf16bf16_bf16f32"},))
    assert located(b, s).where == "model.py:10 forward launches 25 % of the GPU time of these kernels; module Linear: 25 %"



def test_parents_match_the_stack_sweep():
    """The vectorised parent search against the stack sweep it replaces. By hand, thread 0: A [0, 10],
    B [1, 3], C [2, 2.5], D [4, 6] (B has ended), E [11, 12] (A has ended) -> A top level, B and D in
    A, C in B, E top level; thread 1: F [0, 5], G [1, 8], H [6, 7]: F is still under G on the stack
    when H starts, so H's parent is G even though F has ended."""
    import numpy as np

    from tracekit.analyzers.operators import _parents, _parents_sweep

    ts = np.array([0.0, 0.0, 1.0, 1.0, 2.0, 4.0, 6.0, 11.0])
    end = np.array([10.0, 5.0, 3.0, 8.0, 2.5, 6.0, 7.0, 12.0])
    thread = np.array([0, 1, 0, 1, 0, 0, 1, 0])  # A F B G C D H E
    assert _parents(ts, end, thread).tolist() == [-1, -1, 0, 1, 2, 0, 3, -1]
    rng = np.random.default_rng(7)
    for trial in range(200):  # ties, improper nesting, object thread ids
        n = int(rng.integers(0, 200))
        ts = np.sort(rng.integers(0, 40, n).astype(float))
        end = ts + rng.integers(0, 25, n)
        thread = rng.integers(0, 3, n)
        if trial % 4 == 0:
            thread = np.array([("a", 1, None)[k] for k in thread], dtype=object)
        assert _parents(ts, end, thread).tolist() == _parents_sweep(ts, end, thread).tolist()
    # out of order, [5, 6.5], [1, 2.5], [2, 3.5]: the sweep never pops the first (it ends after each
    # later start), so the second sits in it and the third in the second
    unsorted = np.array([5.0, 1.0, 2.0])
    assert _parents(unsorted, unsorted + 1.5, np.zeros(3, dtype=np.int64)).tolist() == [-1, 0, 1]


def test_report_card_sortable_by_op_module_and_line(tmp_path):
    import re

    from tracekit.pipeline.reports import write_report

    html = write_report(stacked_trace(tmp_path, steps=4), tmp_path / "r.html").read_text(encoding="utf-8")
    card = html[html.index('id="r0-operators"'):]
    card = card[:card.index("</section>")]
    # three sortable tables, one per grouping, GPU time first and sorted by it
    assert re.findall(r'<table class="num-table sortable op-table" data-by="(\w+)">', card) == ["op", "module", "line"]
    assert card.count('aria-sort="descending"') == 3
    # the four identical steps are all steady (no set-up step to leave out): 4 × the 20 µs gemm under
    # model.py:10 and Linear_0, 4 × the 5 µs relu kernel under model.py:12
    assert "totals over the 4 steady steps" in card
    for key, gpu in (("model.py:10 forward", 80.0), ("model.py:12 forward", 20.0), ("Linear_0", 80.0)):
        row = re.search(r'<tr><td data-v="([\d.]+)">[^<]*</td>(?:(?!</tr>).)*title="' + re.escape(key) + '"', card)
        assert row is not None and float(row.group(1)) == gpu, key


def test_ops_counted_on_inferred_steps(tmp_path):
    """A trace without step marks (tests/test_steady.py's repeated top-level ops): a prologue op, then
    4 iterations from t = 100 every 100 µs of aten::linear [t, t + 40] -> a 30 µs gemm at t + 100 and
    aten::relu [t + 50, t + 90] -> a 10 µs kernel at t + 140."""
    from tracekit.analyzers.step_plan import plan_steps
    from tracekit.analyzers.step_selection import StepSelection

    b = TraceBuilder()
    b.op("aten::empty", 0, 50)
    for k in range(4):
        t = 100 + 100 * k
        b.launch(t + 5, 5, "gemm", t + 100, 30, ext=b.op("aten::linear", t, 40))
        b.launch(t + 55, 5, "relu_kernel", t + 140, 10, ext=b.op("aten::relu", t + 50, 40))
    rank = tracekit.load_trace(b.write(tmp_path / "inferred.json")).rank()
    plan = plan_steps(rank, StepSelection.of("all"))
    # the windows are the GPU's, from the first gemm at 200 (the loader's origin: 0, 100, 200, 300)
    assert plan.windows.scope == "inferred" and plan.windows.ts.tolist() == [0.0, 100.0, 200.0, 300.0]
    (ops, *_) = operator_views(rank, plan)
    lin = _rows(ops)["aten::linear"]
    # every kernel is in a window (4 × 30 µs under
    # aten::linear), and the ops that start inside them are counted: the linears at 200, 300 and 400
    # (the one at 100 launches before the first window); before, no op had a step and none counted
    assert (lin.gpu_us, lin.launches) == (120.0, 4)
    assert (lin.calls, lin.cpu_total_us) == (3, 120.0)


def _same_key_above(codes: list[int], parent: list[int]) -> list[bool]:
    """Per interval: some ancestor has its key, found by climbing one parent at a time (the definition)."""
    out = []
    for row, code in enumerate(codes):
        up = parent[row]
        while up >= 0 and codes[up] != code:
            up = parent[up]
        out.append(up >= 0)
    return out


def test_same_key_ancestors_by_passes_and_by_the_walk_agree_with_climbing(monkeypatch):
    import numpy as np

    from tracekit.analyzers import operators

    rng = np.random.default_rng(3)
    for passes in (64, 1):  # 1: every forest deeper than one level goes to the walk
        monkeypatch.setattr(operators, "CLIMB_PASSES", passes)
        for n in (0, 1, 4, 40, 250):
            for _ in range(8):
                parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)], dtype=np.int64)
                perm = rng.permutation(n)  # rows in any order
                where = np.argsort(perm)
                parent = np.where(parent[perm] >= 0, where[np.maximum(parent[perm], 0)], -1)
                codes = rng.integers(-1, 4, n)  # -1: a key pandas could not factorize
                got = operators._under_same_key(codes, parent)
                assert got.tolist() == _same_key_above(codes.tolist(), parent.tolist())


def test_a_deep_chain_of_distinct_modules_is_linear():
    """200,000 intervals, each inside the one before, all keys distinct but the innermost one, which
    has the outermost's key: one climb per level per pass was n^2/2 steps (minutes)."""
    import time

    import numpy as np

    from tracekit.analyzers.operators import _under_same_key

    n = 200_000
    codes = np.arange(n)
    codes[-1] = 0
    start = time.perf_counter()
    got = _under_same_key(codes, np.arange(-1, n - 1))
    took = time.perf_counter() - start
    assert np.flatnonzero(got).tolist() == [n - 1]
    assert took < 3.0, f"{took:.1f} s"
