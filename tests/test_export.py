"""`tracekit export`: original events kept, kernel classes in args, verdict/counter/suggestion tracks, atomic."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from tracebuilder import TraceBuilder

from tracekit.cli import main
from tracekit.pipeline.export import PID

ROOT = Path(__file__).resolve().parents[1]


def two_steps(tmp_path: Path, base: float = 1_000_000.0) -> Path:
    """Two 100 µs steps; a 20 µs gemm launched by a 5 µs call ending 10 µs before it starts, then a
    10 µs elementwise kernel 3 µs after its launch call ends. Times from `base` (µs)."""
    b = TraceBuilder()
    b.annotation("ProfilerStep#0", base, 100)
    b.annotation("ProfilerStep#1", base + 100, 100)
    e1 = b.op("aten::mm", base + 10, 50, **{"Input Dims": [[64, 128], [128, 64]], "Input type": ["c10::BFloat16"] * 2})
    b.launch(base + 15, 5, "sm90_xmma_gemm_bf16bf16_bf16f32", base + 30, 20, ext=e1)
    e2 = b.op("aten::add", base + 110, 20)
    b.launch(base + 112, 5, "void at::native::vectorized_elementwise_kernel<4, add>(int)", base + 120, 10, ext=e2)
    return b.write(tmp_path / "two.json")


def _read(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _ours(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if isinstance(e.get("pid"), int) and e["pid"] >= PID]


def test_export_keeps_events_and_adds_tracks(tmp_path):
    base = 1_000_000.0
    src = two_steps(tmp_path, base)
    out = tmp_path / "two.annotated.json.gz"
    assert main(["export", str(src), "-o", str(out), "-q"]) == 0
    doc, orig = _read(out), json.loads(src.read_text())
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}
    kept = doc["traceEvents"][: len(orig["traceEvents"])]
    for before, after in zip(orig["traceEvents"], kept, strict=True):
        if before.get("cat") == "kernel":  # the class is the only addition
            assert {k: v for k, v in after["args"].items() if k != "tracekit_class"} == before["args"]
            assert {k: v for k, v in after.items() if k != "args"} == {k: v for k, v in before.items() if k != "args"}
        else:
            assert after == before
    classes = {e["name"]: e["args"]["tracekit_class"] for e in kept if e.get("cat") == "kernel"}
    assert classes == {"sm90_xmma_gemm_bf16bf16_bf16f32": "gemm",
                       "void at::native::vectorized_elementwise_kernel<4, add>(int)": "elementwise"}
    ours = _ours(doc)
    steps = sorted((e["ts"], e["dur"], e["name"].split(":")[0]) for e in ours if e["ph"] == "X" and e["tid"] == 1)
    assert steps == [(base, 100.0, "tracekit step 0"), (base + 100, 100.0, "tracekit step 1")]
    # queue depth, by hand: +1 when a launch call ends (base+20, base+117), -1 when its kernel starts (base+30, base+120)
    queue = [(e["ts"], e["args"]["queued"]) for e in ours if e["ph"] == "C" and e["name"] == "launch queue depth"]
    assert queue == [(base + 20, 1), (base + 30, 0), (base + 117, 1), (base + 120, 0)]
    busy = [e for e in ours if e["ph"] == "C" and e["name"] == "GPU busy %"]
    assert busy and max(e["args"]["busy"] for e in busy) == 100.0 and min(e["args"]["busy"] for e in busy) == 0.0
    names = {e["args"]["name"] for e in ours if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"tracekit · rank 0"}


def test_export_plain_json_and_no_clobber(tmp_path, capsys):
    src = two_steps(tmp_path)
    out = tmp_path / "x.json"
    out.write_text("keep")
    assert main(["export", str(src), "-o", str(out)]) == 0
    assert out.read_text() == "keep" and "wrote" in capsys.readouterr().out
    assert _ours(_read(tmp_path / "x-1.json"))  # written beside it, plain JSON


@pytest.mark.parametrize("content", [None, "not json", '{"traceEvents": 5}'])
def test_export_bad_input_one_line_no_file(tmp_path, capsys, content):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "o.json.gz"
    assert main(["export", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tracekit: error: ") and "\n" not in err
    assert list(tmp_path.glob("o*")) == []


def test_export_sample_suggestion_range(tmp_path):
    sample = ROOT / "sample_traces" / "gpt2_decode.trace.json.gz"
    if not sample.exists():
        pytest.skip("sample trace absent")
    out = tmp_path / "g.json.gz"
    assert main(["export", str(sample), "-o", str(out), "-q"]) == 0
    doc = _read(out)
    ours = _ours(doc)
    top = [e for e in ours if e["name"].startswith("tracekit suggestion:")]
    assert len(top) == 1 and top[0]["args"]["id"] == "cuda_graphs"
    # the range is the slowest steady step: same ts and dur as that step's verdict slice
    steps = {(e["ts"], e["dur"]) for e in ours if e["ph"] == "X" and e["tid"] == 1 and e["args"]["phase"] == "steady"}
    assert (top[0]["ts"], top[0]["dur"]) in steps
    assert top[0]["dur"] == max(d for _, d in steps)
    raw = _read(sample)
    assert len(doc["traceEvents"]) == len(raw["traceEvents"]) + len(ours)


def test_kernel_events_keep_their_exact_text(tmp_path):
    # epoch-µs timestamps with ns digits do not survive a float64 round trip: the kernel event is
    # copied as text with only the class spliced into its args (and an args object made when absent)
    doc = ('{"schemaVersion": 1, "traceEvents": [\n'
           '{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, '
           '"ts": 1700000000000000.125, "dur": 100},\n'
           '{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": 0, "tid": 7, '
           '"ts": 1700000000000010.123, "dur": 20.001, "args": {"device": 0, "stream": 7}},\n'
           '{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7, '
           '"ts": 1700000000000040.987, "dur": 5}\n]}')
    src = tmp_path / "exact.json"
    src.write_text(doc)
    out = tmp_path / "exact.out.json"
    assert main(["export", str(src), "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert ('"ts": 1700000000000010.123, "dur": 20.001, "args": {"tracekit_class":"gemm","device": 0, "stream": 7}}'
            in text)
    assert '{"args":{"tracekit_class":"gemm"},"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn"' in text
    assert text.startswith('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "user_annotation"')  # top level kept
    json.loads(text)


def test_export_never_writes_over_its_input(tmp_path, capsys):
    src = two_steps(tmp_path)
    before = src.read_bytes()
    assert main(["export", str(src), "-o", str(src), "--force"]) == 2
    assert "is the input trace" in capsys.readouterr().err and src.read_bytes() == before


def test_export_critical_path_track(tmp_path):
    """One complete event per critical-path segment of every modelled steady step (critical_segments
    of the recorded durations, on the trace's clock) and an instant per step with its two spans."""
    from tracekit.model import critical_segments
    from tracekit.pipeline.export import PATH_TRACK, TID_PATH
    from tracekit.pipeline.local import analyse_trace, load_file

    sample = ROOT / "sample_traces" / "gpt2_decode.trace.json.gz"
    if not sample.exists():
        pytest.skip("sample trace absent")
    out = tmp_path / "g.json.gz"
    assert main(["export", str(sample), "-o", str(out), "-q"]) == 0
    ours = _ours(_read(out))
    trace = load_file(sample)
    origin = float(trace.rank().meta.origin_us)
    model = analyse_trace(trace, with_suggestions=False).models[0]
    assert len(model.steps) == 20
    track = [e for e in ours if e.get("tid") == TID_PATH]
    names = [e["args"]["name"] for e in track if e["ph"] == "M"]
    assert names == [PATH_TRACK]
    slices = [e for e in track if e["ph"] == "X"]
    expected = [(s.graph.step, seg) for s in model.steps for seg in critical_segments(s.graph)]
    assert len(slices) == len(expected) > 20 * 100
    for e, (step, seg) in zip(slices, expected, strict=True):
        assert (e["name"], e["args"]["step"]) == (seg.kind, step)
        assert e["ts"] == pytest.approx(origin + seg.start_us, abs=1e-3)
        assert e["dur"] == pytest.approx(seg.length_us, abs=1e-6)
    instants = [e for e in track if e["ph"] == "i"]
    assert [(e["args"]["step"], e["ts"]) for e in instants] == [
        (s.graph.step, pytest.approx(origin + s.graph.window_start_us)) for s in model.steps]
    for e, s in zip(instants, model.steps, strict=True):
        assert e["args"]["traced_span_us"] == pytest.approx(s.graph.traced_span_us)
        assert e["args"]["projected_span_us"] == pytest.approx(s.projected.span_us)
        assert e["args"]["projected_span_us"] < e["args"]["traced_span_us"]
    # each step's slices lie in its window: they start at the step's verdict slice and end with it
    verdict = {e["name"].split(":")[0]: e for e in ours if e["ph"] == "X" and e["tid"] == 1}
    for s in model.steps:
        mine = [e for e in slices if e["args"]["step"] == s.graph.step]
        v = verdict[f"tracekit step {s.graph.step}"]
        assert mine[0]["ts"] == pytest.approx(v["ts"], abs=1e-3)
        assert mine[-1]["ts"] + mine[-1]["dur"] == pytest.approx(v["ts"] + v["dur"], abs=1e-3)


def test_export_without_a_model_has_no_track_and_says_why(tmp_path, capsys):
    from test_report_model import no_marks_trace

    from tracekit.pipeline.export import TID_PATH

    src = no_marks_trace(tmp_path / "nomarks.json")
    out = tmp_path / "n.json"
    assert main(["export", str(src), "-o", str(out)]) == 0
    assert not [e for e in _ours(_read(out)) if e.get("tid") == TID_PATH]
    said = capsys.readouterr().out
    assert "no critical-path track: the execution model abstains (no ProfilerStep marks" in said


def test_export_rank_directory_one_file_per_rank(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        path = two_steps(tmp_path)
        doc = json.loads(path.read_text())
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
        (run / f"rank{rank}.json").write_text(json.dumps(doc))
        path.unlink()
    assert main(["export", str(run)]) == 0
    out = capsys.readouterr().out
    written = sorted((tmp_path / "run.annotated").iterdir())
    assert [p.name for p in written] == ["rank0.annotated.json.gz", "rank1.annotated.json.gz"]
    assert out.count("wrote ") == 2 and out.count(" kB, ") == 2  # a few kB each: sizes in units that fit
    for rank, path in enumerate(written):
        doc = _read(path)
        assert doc["distributedInfo"]["rank"] == rank and _ours(doc)  # the rank's own events, plus tracekit's
