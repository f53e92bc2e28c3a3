"""Hypothesis mutates real sample traces (types, missing keys, huge and negative numbers, unicode and
control characters, nesting, long adversarial names) and checks the corpus promises on each
(test_fuzz_corpus.check_case). CI runs a few dozen examples; benchmarks/fuzz_corpus.py thousands."""

from __future__ import annotations

import gzip
import json
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_fuzz_corpus import COMMANDS, Case, check_case  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ("triton_vector_add", "linear_bf16", "attention_sdpa", "elementwise_compiled")
CI_EXAMPLES = 15


@cache
def sample_text(name: str) -> str:
    with gzip.open(REPO / "sample_traces" / f"{name}.trace.json.gz", "rt", encoding="utf-8") as fh:
        return fh.read()


ADVERSARIAL = st.sampled_from([
    "triton_poi_fused_" + "_" * 30 + "!", "xmma_" * 3000, "cutlass" * 3000, "ProfilerStep#" + "9" * 30,
    "\x1b[31m", "a\nb", "\u202e", "<script>alert(1)</script>", "{{7*7}}", "9" * 5000, "NaN", "Infinity",
])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), ADVERSARIAL,
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
FIELDS = st.sampled_from(["ts", "dur", "pid", "tid", "name", "cat", "ph", "id", "args", "bp", "s"])
ARGS = st.sampled_from(["correlation", "External id", "Input Dims", "Input type", "Input Strides",
                        "Concrete Inputs", "grid", "block", "stream", "device", "registers per thread",
                        "shared memory", "bytes", "kernel_file", "num_warps", "Ev Idx"])
TOP = st.sampled_from(["deviceProperties", "distributedInfo", "schemaVersion", "baseTimeNanoseconds",
                       "tracekit", "traceName"])
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(min_value=0), FIELDS, VALUES),
    st.tuples(st.just("del"), st.integers(min_value=0), FIELDS, st.none()),
    st.tuples(st.just("arg"), st.integers(min_value=0), ARGS, VALUES),
    st.tuples(st.just("nest"), st.integers(min_value=0), ARGS, st.integers(min_value=1, max_value=3000)),
    st.tuples(st.just("top"), st.just(0), TOP, VALUES),
    st.tuples(st.just("drop"), st.integers(min_value=0), st.just(""), st.none()),
    st.tuples(st.just("dup"), st.integers(min_value=0), st.just(""), st.none()),
)


def mutate(doc: dict, mutations: list[tuple[str, int, str, Any]]) -> str:
    """Apply `mutations` to a decoded trace; the JSON text (nesting spliced in as raw text)."""
    events = doc["traceEvents"]
    nests: list[tuple[dict, str, int]] = []
    for kind, index, key, value in mutations:
        if kind == "top":
            doc[key] = value
            continue
        if not events:
            continue
        event = events[index % len(events)]
        if kind == "set":
            event[key] = value
        elif kind == "del":
            event.pop(key, None)
        elif kind == "drop":
            events.remove(event)
        elif kind == "dup":
            events.append(dict(event))
        elif isinstance(event.get("args"), dict):
            if kind == "arg":
                event["args"][key] = value
            else:
                event["args"][key] = f"@@NEST{len(nests)}@@"
                nests.append((event, key, value))
    text = json.dumps(doc)
    for i, (_, _, depth) in enumerate(nests):
        text = text.replace(f'"@@NEST{i}@@"', "[" * depth + "]" * depth, 1)
    return text


def check_mutation(sample: str, mutations: list, commands: tuple = COMMANDS) -> list[str]:
    doc = json.loads(sample_text(sample))
    text = mutate(doc, mutations)

    def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
        path = folder / "m.json"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        return path, ()

    with tempfile.TemporaryDirectory() as tmp:
        return check_case(Case(f"hypothesis:{sample}", make, commands=commands), Path(tmp))


@settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sample=st.sampled_from(SAMPLES), mutations=st.lists(MUTATION, min_size=1, max_size=6))
def test_mutated_sample_traces_keep_every_promise(sample: str, mutations: list) -> None:
    problems = check_mutation(sample, mutations)
    assert not problems, "\n".join(problems)
