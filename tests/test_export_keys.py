"""`tracekit export` reads traceEvents and args as the loader does (escaped, duplicated, nested
look-alike keys), writes one args and one label per kernel event, and re-exports cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path

from test_export import two_steps

from tracekit.cli import main
from tracekit.pipeline.export import PID

# the two kernels of test_export.two_steps and the classes test_export asserts for them
CLASSES = {"sm90_xmma_gemm_bf16bf16_bf16f32": "gemm",
           "void at::native::vectorized_elementwise_kernel<4, add>(int)": "elementwise"}


def _pairs(text: str) -> object:
    """The JSON with every object as a list of (key, value) pairs: duplicate keys stay visible."""
    return json.loads(text, object_pairs_hook=lambda kv: kv)


def _events(text: str) -> list[list[tuple[str, object]]]:
    top = _pairs(text)
    assert isinstance(top, list)
    lists = [v for k, v in top if k == "traceEvents"]
    return lists[-1]


def _kernels(events: list) -> list[list[tuple[str, object]]]:
    return [e for e in events if ("cat", "kernel") in e]


def _export(src: Path, out: Path) -> str:
    assert main(["export", str(src), "-o", str(out), "-q", "--force"]) == 0
    return out.read_text()


def _labels_once(events: list) -> dict[str, str]:
    """name -> label of every kernel event, checking each has exactly one args and one label."""
    labels = {}
    for e in _kernels(events):
        args = [v for k, v in e if k == "args"]
        assert len(args) == 1, e
        label = [v for k, v in args[0] if k == "tracekit_class"]
        assert len(label) == 1, e
        labels[dict(e)["name"]] = label[0]
    return labels


def test_escaped_duplicated_and_nested_trace_events_keys(tmp_path):
    src = two_steps(tmp_path)
    body = src.read_text()
    events = body[body.index("["):body.rindex("]") + 1]
    decoy = '[{"ph": "X", "cat": "kernel", "name": "decoy", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]'
    variants = {
        "escaped": '{"schemaVersion": 1, "trace\\u0045vents": ' + events + "}",
        "duplicated": '{"traceEvents": ' + decoy + ', "schemaVersion": 1, "traceEvents": ' + events + "}",
        "nested": '{"meta": {"traceEvents": ' + decoy + '}, "schemaVersion": 1, "traceEvents": ' + events + "}",
    }
    for label, text in variants.items():
        path = tmp_path / f"{label}.json"
        path.write_text(text)
        out = _export(path, tmp_path / f"{label}.out.json")
        # the array the loader reads (the last top-level traceEvents) is the one labelled
        assert _labels_once(_events(out)) == CLASSES, label
        assert "decoy" not in out or '"name": "decoy", "pid": 0, "tid": 7, "ts": 1, "dur": 1}' in out, label


def test_kernel_args_escaped_null_or_duplicated_get_one_args_with_the_label(tmp_path):
    src = two_steps(tmp_path)
    text = src.read_text()
    gemm = '"name": "sm90_xmma_gemm_bf16bf16_bf16f32"'
    assert text.count(gemm) == 1
    head, tail = text.split(gemm)
    cases = {
        "escaped": text.replace('"args": {"device": 0, "stream": 7, "correlation"', '"\\u0061rgs": {"device": 0, '
                                '"stream": 7, "correlation"'),
        "null": head + gemm + tail.replace('"args": {"device": 0, "stream": 7, "correlation": 1000, ', '"args": null, '
                                           '"x": {"correlation": 1000, ', 1),
        "duplicate": head + gemm + tail.replace('"args": {', '"args": {"old": 1}, "args": {', 1),
        "label_elsewhere": head + gemm + tail.replace('"args": {"device": 0,', '"args": {"device": 0, '
                                                       '"tracekit_class": "stale",', 1),
    }
    for label, doc in cases.items():
        assert doc != text, label
        path = tmp_path / f"{label}.json"
        path.write_text(doc)
        out = _export(path, tmp_path / f"{label}.out.json")
        labels = _labels_once(_events(out))
        assert labels == CLASSES, (label, labels)
        gemm_event = dict(next(e for e in _kernels(_events(out)) if ("name", "sm90_xmma_gemm_bf16bf16_bf16f32") in e))
        args = dict(gemm_event["args"])
        if label == "duplicate":  # the last args is the one the loader read: it is kept, the first dropped
            assert "old" not in args and args["stream"] == 7
        if label in ("escaped", "label_elsewhere"):  # the original members stay, with their values
            assert args["device"] == 0 and args["stream"] == 7


def test_re_export_replaces_the_earlier_additions(tmp_path):
    src = two_steps(tmp_path)
    first = _export(src, tmp_path / "once.json")
    once = tmp_path / "once.json"
    second = _export(once, tmp_path / "twice.json")
    e1, e2 = _events(first), _events(second)
    assert _labels_once(e2) == CLASSES  # one label each, not two
    ours1 = [e for e in e1 if isinstance(dict(e).get("pid"), int) and dict(e)["pid"] >= PID]
    ours2 = [e for e in e2 if isinstance(dict(e).get("pid"), int) and dict(e)["pid"] >= PID]
    # the same tracekit events as one export writes (the old ones dropped, the new ones added)
    assert len(ours2) == len(ours1) > 0
    names = [dict(e)["args"] for e in ours2 if ("name", "process_name") in e]
    assert names == [[("name", "tracekit · rank 0")]]
    assert len(e2) == len(e1)  # original events + one set of tracekit's


def test_args_string_full_of_event_separators(tmp_path):
    src = two_steps(tmp_path)
    doc = json.loads(src.read_text())
    note = "},{" * 4_000_000  # 12 MB of what looks like the gap between two events
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["args"]["note"] = note
    path = tmp_path / "seps.json"
    path.write_text(json.dumps(doc))
    start = time.perf_counter()
    out = _export(path, tmp_path / "seps.out.json")
    assert time.perf_counter() - start < 30  # one decode per doubling of the chunk, not per false cut
    events = _events(out)
    assert _labels_once(events) == CLASSES
    kept = [dict(dict(e)["args"]).get("note") for e in _kernels(events)]
    assert note in kept
