"""Bad-input corpus: hundreds of generated hostile or broken inputs against `info`, `analyze --json`
and `report`. Every run must exit 0 or 2; on 2 print exactly one stderr line naming the file and
the problem; never a traceback, a raw control character, a leftover or partial output file, or a
changed input; and finish in well under 5 s (the inputs are small).

The corpus is generated here (`corpus()`); benchmarks/fuzz_corpus.py runs it with many more
hypothesis examples and prints the counts."""

from __future__ import annotations

import contextlib
import faulthandler
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tracekit.cli import main
from tracekit.terminal import visible

# Raw control characters that must never reach a terminal (newline ends lines; nothing else).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SLOW_S = 5.0
COMMANDS = (("info",), ("analyze", "--json"), ("report",))


class RawJSON(str):
    """A JSON text spliced verbatim into a document (deep nesting, bare NaN, huge numbers)."""


def dumps(doc: object) -> str:
    """json.dumps, with RawJSON values spliced in as given."""
    raws: list[str] = []

    def default(o: object) -> object:
        raise TypeError(o)

    def walk(o: object) -> object:
        if isinstance(o, RawJSON):
            raws.append(str(o))
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o

    text = json.dumps(walk(doc), default=default)
    return re.sub(r'"\\u0000RAW(\d+)\\u0000"', lambda m: raws[int(m.group(1))], text)


def deep(n: int, kind: str = "list") -> RawJSON:
    return RawJSON(("[" * n + "]" * n) if kind == "list" else ('{"a":' * n + "1" + "}" * n))


def base_doc() -> dict:
    """A small, valid Kineto trace: two steps, ops with shapes, launches, kernels, a memcpy, flows."""
    ev: list[dict] = []
    corr = 100
    for step in range(2):
        t0 = 1000.0 + step * 500
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": 400, "args": {"External id": 1 + step * 10}})
        for k, (op, kernel) in enumerate((("aten::mm", "ampere_sgemm_128x64_nn"),
                                           ("aten::add", "vectorized_elementwise_kernel<4, add>"))):
            ext = 2 + step * 10 + k
            ts = t0 + 10 + k * 100
            ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": ts, "dur": 50,
                       "args": {"External id": ext, "Input Dims": [[64, 32], [32, 16]],
                                "Input type": ["float", "float"], "Input Strides": [[32, 1], [16, 1]],
                                "Concrete Inputs": ["", ""]}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": ts + 5, "dur": 8, "args": {"correlation": corr, "External id": ext}})
            ev.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7, "ts": ts + 20,
                       "dur": 30, "args": {"device": 0, "stream": 7, "correlation": corr, "External id": ext,
                                           "grid": [4, 1, 1], "block": [128, 1, 1],
                                           "registers per thread": 32, "shared memory": 0}})
            ev.append({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": ts + 5, "cat": "ac2g", "name": "ac2g"})
            ev.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts + 20, "cat": "ac2g", "name": "ac2g",
                       "bp": "e"})
            corr += 1
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
                   "tid": 7, "ts": t0 + 300, "dur": 5, "args": {"device": 0, "stream": 7, "bytes": 4096}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150 * 2**30,
                                                      "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "traceEvents": ev}


# Values that a number, id, name or shape field may hold in a hostile file.
BAD_VALUES: tuple[object, ...] = (
    None, "", "abc", "NaN", "Infinity", "-Infinity", "1e999", "-1e999", "sNaN", "12.5", "١٢", "9" * 5000,
    RawJSON("NaN"), RawJSON("Infinity"), RawJSON("1e999"), RawJSON("-1e999"), RawJSON("1" * 400),
    -1, 0, 1e308, -1e308, 2**63, 2**64, -(2**63) - 1, 10**30, True, [], {}, [1, 2, 3], {"a": 1},
    [[[[[1]]]]], deep(500), deep(5000), deep(100000), deep(3000, "dict"),
    "\x1b[31mred\x1b[0m", "line\nforged: error", "\u202eevil", "<script>alert(1)</script>",
)
EVENT_FIELDS = ("ts", "dur", "pid", "tid", "name", "cat", "ph", "id", "args")
ARG_FIELDS = ("correlation", "External id", "external id", "Input Dims", "Input type", "Input Strides",
              "Concrete Inputs", "grid", "block", "stream", "device", "registers per thread",
              "shared memory", "bytes", "blocks per SM", "est. achieved occupancy %", "kernel_file")
# which event of base_doc() each mutation targets: annotation, op, launch, kernel, flow, memcpy
TARGETS = {"annotation": 0, "op": 1, "launch": 2, "kernel": 3, "flow": 4, "memcpy": 13}
META_FIELDS = ("deviceProperties", "distributedInfo", "schemaVersion", "baseTimeNanoseconds", "tracekit",
               "cuda_runtime_version")
META_VALUES: tuple[object, ...] = (
    None, "x", 7, [], {}, [1, "a"], [{"id": "0", "name": 5, "numSms": "lots", "totalGlobalMem": -1}],
    [{"id": 2**70, "name": ["H100"], "computeMajor": 1e999}], [{"name": "NVIDIA H200" + "9" * 20000}],
    "{'name': 'NVIDIA H100', 'id': 0}", "{'name': " * 300, "[" * 100000, {"rank": 2**80, "world_size": "x"},
    {"rank": -5}, deep(900), deep(100000), deep(800, "dict"), "\x1b]0;pwned\x07", 2**200,
)
ADVERSARIAL_NAMES = (
    "triton_poi_fused_" + "_" * 40 + "!", "triton_poi_fused_" + "clone_" * 2000 + "!",
    "xmma_" * 20000, "sm80_xmma_" * 5000 + "cudnn", "triton_red_" + "mean" * 10000,
    "cutlass" * 20000, "gemv" * 20000, "HtoD" * 20000, "Memcpy " * 10000, "9" * 50000 + " GB",
    "ProfilerStep#" + "9" * 40, "ProfilerStep#-1", "ProfilerStep#١٢", "ProfilerStep#" + "1" * 19,
    "a" * 200000, "\x1b[2J\x1b[H" * 10, "name\r\nforged", "\x00\x01\x7f\x9b", "\ud800" * 0 + "\u2028x",
)


@dataclass(frozen=True)
class Case:
    """One corpus entry: `make(folder)` writes the input and returns (input path, extra CLI args)."""

    name: str
    make: Callable[[Path], tuple[Path, tuple[str, ...]]]
    commands: tuple[tuple[str, ...], ...] = COMMANDS
    expect: int | None = None  # exit code required, when the case has one outcome
    verify: Callable[[Path, tuple[str, ...], str, str], list[str]] | None = None  # (work, args, out, err)
    names_file: bool = True  # an error line names a file (False: a bad option value)
    around: Callable[[], contextlib.AbstractContextManager[object]] | None = None  # held while each command runs


def _writer(doc_text: Callable[[], str | bytes], filename: str = "t.json") -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
    def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
        data = doc_text()
        path = folder / filename
        payload = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        path.write_bytes(gzip.compress(payload) if filename.endswith(".gz") else payload)
        return path, ()
    return make


def _mutated(target: str, field: str, value: object, in_args: bool) -> Callable[[], str]:
    def text() -> str:
        doc = base_doc()
        event = doc["traceEvents"][TARGETS[target]]
        if in_args:
            event.setdefault("args", {})[field] = value
        else:
            event[field] = value
        return dumps(doc)
    return text


def _inductor(key: str, value: object) -> Callable[[], str]:
    def text() -> str:
        doc = base_doc()
        doc["traceEvents"][TARGETS["op"]]["args"].update({"kernel_file": "/tmp/k.py", key: value})
        return dumps(doc)
    return text


def _meta_mutated(field: str, value: object) -> Callable[[], str]:
    def text() -> str:
        doc = base_doc()
        doc[field] = value
        return dumps(doc)
    return text


def _named(target: str, name: str) -> Callable[[], str]:
    def text() -> str:
        doc = base_doc()
        for event in doc["traceEvents"]:
            kind = {"kernel": "kernel", "op": "cpu_op", "annotation": "user_annotation"}[target]
            if event.get("cat") == kind:
                event["name"] = name
        return dumps(doc)
    return text


def _file_cases() -> Iterator[Case]:
    good = dumps(base_doc()).encode()
    gz = gzip.compress(good)
    files: dict[str, bytes] = {
        "empty.json": b"", "spaces.json": b"   \n\t ", "nul.json": b"\0" * 100, "scalar.json": b"42",
        "string.json": b'"traceEvents"', "list_scalars.json": b"[1, 2, 3]", "list_lists.json": b"[[1], [2]]",
        "events_null.json": b'{"traceEvents": null}', "events_obj.json": b'{"traceEvents": {}}',
        "events_str.json": b'{"traceEvents": "x"}', "events_empty.json": b'{"traceEvents": []}',
        "events_scalars.json": b'{"traceEvents": [1, "a", null]}', "bom.json": b"\xef\xbb\xbf" + good,
        "utf16.json": good.decode().encode("utf-16"), "latin1.json": b'{"traceEvents": [{"name": "\xff\xfe"}]}',
        "binary.json": bytes(range(256)) * 10, "garbage.json.gz": b"\x1f\x8bnot really gzip",
        "gz_header_only.json.gz": gz[:10], "truncated.json.gz": gz[: len(gz) // 2],
        "gz_bad_crc.json.gz": gz[:-8] + b"\0\0\0\0" + gz[-4:], "gz_trailer_lie.json.gz": gz[:-4] + b"\xff\xff\xff\xff",
        "gz_two_members.json.gz": gzip.compress(good[:100]) + gzip.compress(good[100:]),
        "gz_trailing_zeros.json.gz": gz + b"\0" * 64, "gz_trailing_junk.json.gz": gz + b"junk",
        "gz_of_gz.json.gz": gzip.compress(gz), "gz_empty.json.gz": gzip.compress(b""),
        "gz_spaces.json.gz": gzip.compress(b" " * 1000), "dup_keys.json": good.replace(b"{", b'{"ph": 1, ', 1),
        "bare_array.json": dumps(base_doc()["traceEvents"]).encode(), "only_meta.json": b'{"deviceProperties": []}',
        "deep_top.json": b"[" * 100000 + b"]" * 100000, "deep_events.json": b'{"traceEvents": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "unterminated_string.json": b'{"traceEvents": [{"name": "' + b"},{" * 100000,
        "commas_in_name.json": good.replace(b"aten::mm", b"aten::mm" + b"},{" * 50000),
        "huge_number.json": good.replace(b'"ts": 1000.0', b'"ts": 1' + b"0" * 5000, 1),
    }
    for cut in (1, 7, 50, 200, 1000, 3000, len(good) - 2):
        files[f"truncated_at_{cut}.json"] = good[:cut]
    for name, data in files.items():
        yield Case(f"file:{name}", _writer(lambda d=data: d, name))

    def directory(kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            d = folder / "ranks"
            d.mkdir()
            if kind in ("good", "mixed"):
                (d / "rank0.json").write_bytes(good)
                (d / "rank1.json.gz").write_bytes(gz)
            if kind in ("bad", "mixed"):
                (d / "rank2.json").write_bytes(b"{")
                (d / "rank3.json.gz").write_bytes(b"\x1f\x8b junk")
            if kind == "subdirs":
                (d / "x.json").mkdir()
            if kind == "dangling":
                (d / "rank0.json").symlink_to(folder / "nowhere.json")
            return d, ()
        return make

    for kind in ("empty", "good", "bad", "mixed", "subdirs", "dangling"):
        yield Case(f"dir:{kind}", directory(kind))

    def special(kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            p = folder / f"{kind}.json"
            if kind == "missing":
                return p, ()
            if kind == "fifo":
                os.mkfifo(p)
            elif kind == "loop":
                p.symlink_to(p)
            elif kind == "dangling":
                p.symlink_to(folder / "gone.json")
            elif kind == "devnull":
                return Path(os.devnull), ()
            return p, ()
        return make

    for kind in ("missing", "fifo", "loop", "dangling", "devnull"):
        yield Case(f"special:{kind}", special(kind), expect=2)

    for label, fname in (("esc", "a\x1b[31mred.json"), ("newline", "a\nforged: ok.json"),
                         ("bell", "bell\x07.json.gz"), ("bidi", "x\u202egnp.json"), ("c1", "c1\x9b2J.json")):
        yield Case(f"filename:{label}", _writer(lambda: dumps(base_doc()), fname))
        yield Case(f"filename_bad:{label}", _writer(lambda: "{", fname), expect=2)


def _value_cases() -> Iterator[Case]:
    for target in TARGETS:
        for field in EVENT_FIELDS:
            for i, value in enumerate(BAD_VALUES):
                if (i + len(field) + len(target)) % 3 == 0 or target in ("kernel", "op"):
                    yield Case(f"event:{target}.{field}={i}", _writer(_mutated(target, field, value, False)))
        for field in ARG_FIELDS:
            for i, value in enumerate(BAD_VALUES):
                if (i + len(field) + len(target)) % 4 == 0 or (target in ("kernel", "op") and i % 2 == 0):
                    yield Case(f"args:{target}.{field}={i}", _writer(_mutated(target, field, value, True)))
    for key in ("num_warps", "kernel_kwargs", "grid", "tracekit_user_kernel", "tracekit_uses_dot"):
        for i, value in enumerate(BAD_VALUES):  # Inductor / Triton launch ops keep all their args
            yield Case(f"inductor:{key}={i}", _writer(_inductor(key, value)))
    for field in META_FIELDS:
        for i, value in enumerate(META_VALUES):
            yield Case(f"meta:{field}={i}", _writer(_meta_mutated(field, value)))
    for target in ("kernel", "op", "annotation"):
        for i, name in enumerate(ADVERSARIAL_NAMES):
            yield Case(f"name:{target}={i}", _writer(_named(target, name), "n.json.gz"))


def _output_cases() -> Iterator[Case]:
    """`report -o`: paths that are the input (however spelled), directories, missing folders."""
    def make(kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def inner(folder: Path) -> tuple[Path, tuple[str, ...]]:
            src = folder / "T.json"
            src.write_text(dumps(base_doc()))
            sub = folder / "sub"
            sub.mkdir()
            if kind == "self":
                return src, ("-o", str(src), "--force")
            if kind == "dotdot":
                return src, ("-o", str(sub / ".." / "T.json"), "--force")
            if kind == "symlink":
                (folder / "link.html").symlink_to(src)
                return src, ("-o", str(folder / "link.html"), "--force")
            if kind == "hardlink":
                os.link(src, folder / "hard.html")
                return src, ("-o", str(folder / "hard.html"), "--force")
            if kind == "rank_member":
                d = folder / "ranks"
                d.mkdir()
                (d / "rank0.json").write_text(dumps(base_doc()))
                (d / "rank1.json").write_text(dumps(base_doc()))
                return d, ("-o", str(d / "rank1.json"), "--force")
            if kind == "directory":
                return src, ("-o", str(sub))
            if kind == "missing_dir":
                return src, ("-o", str(folder / "nope" / "r.html"))
            if kind == "file_as_dir":
                return src, ("-o", str(src / "r.html"))
            raise AssertionError(kind)
        return inner

    for kind in ("self", "dotdot", "symlink", "hardlink", "rank_member", "directory", "missing_dir", "file_as_dir"):
        yield Case(f"output:{kind}", make(kind), commands=(("report",),), expect=2)


# Names that a shell or a terminal would act on: a pasted command must give them back literally
# (shlex.split), a terminal must see no raw control character.
HOSTILE_NAMES = ("a$(touch PWNED).json", "b`touch PWNED`.json", "c; touch PWNED.json", "d'q\"q.json",
                 "e \\ space.json", "f\x1b]0;title\x07\x1b[31mred.json", "g\u202egnp.json",
                 "h\nforged: ok.json")
PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]*$")


def _run_folder(folder: Path, *, capture: bool = True, broken: str = "") -> Path:
    """RUN/ with two rank files and (when `capture`) a capture_traces/ folder: cap.json, plus one
    broken file of kind `broken`."""
    run = folder / "RUN"
    run.mkdir()
    (run / "rank0.json").write_text(dumps(base_doc()))
    (run / "rank1.json").write_text(dumps(base_doc()))
    caps = run / "capture_traces"
    if capture:
        caps.mkdir()
        (caps / "cap.json").write_text(dumps(base_doc()))
    bad = caps / "bad.json"
    if broken == "truncated":
        bad.write_text('{"traceEvents": [')
    elif broken == "gzip":
        (caps / "bad.json.gz").write_bytes(b"\x1f\x8bjunk")
    elif broken == "empty":
        bad.write_bytes(b"")
    elif broken == "dir":
        bad.mkdir()
    elif broken == "dangling":
        bad.symlink_to(folder / "gone.json")
    elif broken == "fifo":
        os.mkfifo(bad)
    return run


def _no_dev_null_copy(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """/dev/null is written in place: still a character device, no /dev/null-1 beside it."""
    import stat

    problems = [] if stat.S_ISCHR(os.stat(os.devnull).st_mode) else ["/dev/null is no longer a device"]
    return problems + (["wrote /dev/null-1"] if os.path.lexists(os.devnull + "-1") else [])


def _ranks_read_once(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """The same file given three ways counts once: RUN/ holds two ranks (RUN/rank0.json given again
    as RUN/../RUN/rank0.json and through the symlink LINK/), and a note says so."""
    problems = [] if "read once" in err else ["no note about the file read once"]
    if args[0] == "analyze":
        ranks = json.loads(out).get("ranks", [])
        problems += [] if len(ranks) == 2 else [f"{len(ranks)} ranks, not 2"]
    if args[0] == "info":
        problems += [] if re.search(r"^ranks\s+2 \(0, 1\)$", out, re.M) else [f"ranks line: {out[:200]!r}"]
    return problems


def _capture_skipped(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """A broken file in a found capture_traces/ folder is skipped with a warning, as a broken rank file is;
    an entry named like a trace that is not a regular file (a folder, a FIFO, a dangling link) is named
    as such."""
    bad = work / "RUN" / "capture_traces" / "bad.json"
    if bad.is_symlink() or (bad.exists() and not bad.is_file()):
        return [] if "bad.json: not a regular file; skipped" in err else ["no warning naming the irregular entry"]
    broken = not bad.is_file() and not (work / "RUN" / "capture_traces" / "bad.json.gz").is_file()
    return [] if broken or "skipped capture_traces/ file" in err else ["no warning about the broken capture file"]


def _rank_entry_skipped(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """An entry of a rank directory named like a trace that is not a regular file: both ranks read, one
    warning naming it."""
    problems = [] if "odd.json: not a regular file; skipped" in err else ["no warning naming the irregular entry"]
    return problems + ([] if re.search(r"^ranks\s+2 \(0, 1\)$", out, re.M) else [f"ranks line: {out[:200]!r}"])


def _commands_paste_back(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """Every `tracekit export` command the HTML page shows gives the literal trace path back when a
    shell parses it (shlex.split); no PWNED file was made by anything tracekit ran."""
    import html
    import shlex

    problems = ["a file name was run"] if any(p.name.startswith("PWNED") for p in work.rglob("*")) else []
    for page in (p for p in work.rglob("*.html") if p.is_file()):
        commands = re.findall(r"<code>(tracekit export .*?)</code>", page.read_text(encoding="utf-8"), re.S)
        if args[0] == "report" and not commands:
            problems.append(f"{page.name} shows no export command")
        for shown in commands:
            trace = str(Path(args[1]))
            try:
                words = shlex.split(html.unescape(shown))
            except ValueError as exc:  # an unbalanced quote: the shell would read on
                words = [str(exc)]
            if words[:3] != ["tracekit", "export", trace] or words[3:4] != ["-o"]:
                problems.append(f"shown command {shown!r} does not give {trace!r} back")
    return problems


def io_cases() -> Iterator[Case]:
    """Outputs that resolve to any input (capture traces given or found, rank files of either side of
    a diff), special files as outputs, inputs spelled several ways, hostile file names, bad gate values."""
    def refused(command: str, kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            run = _run_folder(folder)
            cap = run / "capture_traces" / "cap.json"
            src = folder / "T.json"
            src.write_text(dumps(base_doc()))
            if kind == "found_capture":
                return (run if command == "report" else run / "rank0.json"), ("-o", str(cap), "--force")
            if kind == "given_capture":
                other = folder / "CAP.json"
                other.write_text(dumps(base_doc()))
                return src, ("--capture", str(other), "-o", str(other), "--force")
            if kind == "dotdot_capture":
                return run / "rank1.json", ("-o", str(run / "x" / ".." / "capture_traces" / "cap.json"), "--force")
            if kind == "symlink_self":
                (folder / "link.json.gz").symlink_to(src)
                return src, ("-o", str(folder / "link.json.gz"), "--force")
            if kind == "hardlink_rank":
                os.link(run / "rank1.json", folder / "hard.json")
                return run, ("-o", str(folder / "hard.json"), "--force")
            if kind == "diff_before_rank":
                return run, (str(src), "--html", str(run / "rank1.json"), "--force")
            if kind == "diff_after_rank":
                return src, (str(run), "--html", str(folder / "RUN" / ".." / "RUN" / "rank0.json"), "--force")
            if kind == "diff_capture":
                return src, (str(run), "--html", str(cap), "--force")
            if kind == "calibration":  # --calibration FILE is read too
                from tracekit.pipeline.calibration import SCHEMA

                cal = folder / "cal.json"
                cal.write_text(json.dumps({"schema": SCHEMA, "device": "NVIDIA H200", "date": "2026-12-01",
                                           "per_event_us": 4.0, "launch_p10_us": 5.85, "bare_launch_us": 3.5}))
                return src, ("--calibration", str(cal), "-o", str(cal), "--force")
            if kind == "fifo_no_reader":
                os.mkfifo(folder / "pipe")
                return src, (("--html" if command == "diff" else "-o"), str(folder / "pipe"))
            raise AssertionError(kind)
        return make

    for command, kinds in (("report", ("found_capture", "given_capture", "hardlink_rank", "calibration",
                                       "fifo_no_reader")),
                           ("export", ("found_capture", "dotdot_capture", "symlink_self", "fifo_no_reader")),
                           ("diff", ("diff_before_rank", "diff_after_rank", "diff_capture"))):
        for kind in kinds:
            yield Case(f"io:{command}:{kind}", refused(command, kind), commands=((command,),), expect=2)

    def devnull(command: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            src = folder / "T.json"
            src.write_text(dumps(base_doc()))
            return src, ((str(src), "--html", os.devnull) if command == "diff" else ("-o", os.devnull))
        return make

    for command in ("report", "export", "diff"):
        yield Case(f"io:{command}:devnull", devnull(command), commands=((command,),), expect=0,
                   verify=_no_dev_null_copy)

    def spelled(folder: Path) -> tuple[Path, tuple[str, ...]]:
        run = _run_folder(folder, capture=False)
        (folder / "LINK").symlink_to(run)
        return run, (str(run / ".." / "RUN" / "rank0.json"), str(folder / "LINK" / "rank1.json"))

    yield Case("io:inputs:read_once", spelled, expect=0, verify=_ranks_read_once)

    def broken_capture(kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            return _run_folder(folder, broken=kind) / "rank0.json", ()
        return make

    for kind in ("truncated", "gzip", "empty", "dir", "dangling", "fifo"):
        yield Case(f"io:capture_broken:{kind}", broken_capture(kind), expect=0, verify=_capture_skipped,
                   commands={"truncated": (("info",), ("report",), ("export",)),
                             "gzip": (("analyze",), ("report",))}.get(kind, (("info",),)))

    def rank_entry(kind: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            run = _run_folder(folder, capture=False)
            if kind == "fifo":
                os.mkfifo(run / "odd.json")
            else:
                (run / "odd.json").mkdir()
            return run, ()
        return make

    for kind in ("fifo", "dir"):
        yield Case(f"io:rank_irregular:{kind}", rank_entry(kind), expect=0, verify=_rank_entry_skipped,
                   commands=(("info",),))

    def gate(value: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            src = folder / "T.json"
            src.write_text(dumps(base_doc()))
            return src, (str(src), "--fail-if-slower", value)
        return make

    for value in ("nan", "inf", "-inf", "-1", "abc"):
        yield Case(f"io:gate:{value}", gate(value), commands=(("diff",),), expect=2, names_file=False)

    def hostile(name: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            src = folder / name
            src.write_text(dumps(base_doc()))
            return src, ()
        return make

    def exported_before(name: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def make(folder: Path) -> tuple[Path, tuple[str, ...]]:
            from tracekit.paths import export_path

            src, extra = hostile(name)(folder)
            export_path(src).write_bytes(b"an earlier export")  # export says it exists, writes NAME-1
            return src, extra
        return make

    def says_exists(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
        return [] if " exists; wrote " in err else ["no line about the existing output"]

    for i, name in enumerate(HOSTILE_NAMES[-3:]):
        yield Case(f"io:name_exists:{i}", exported_before(name), expect=0, verify=says_exists,
                   commands=(("export",),))
    for i, name in enumerate(HOSTILE_NAMES):
        yield Case(f"io:name:{i}", hostile(name), expect=0, verify=_commands_paste_back,
                   commands=(("info",), ("analyze",), ("report",), ("export",)))
        yield Case(f"io:name_diff:{i}", lambda folder, n=name: (hostile(n)(folder)[0], (
            str(folder / n), "--html", str(folder / f"{n}.html"))), expect=0, verify=_commands_paste_back,
            commands=(("diff",),))
def _export_once(work: Path, args: tuple[str, ...], out: str, err: str) -> list[str]:
    """The export `tracekit export` wrote: every kernel event with one args holding one
    tracekit_class, and one tracekit process (an exported file exported again replaces them)."""
    from tracekit.paths import export_path
    from tracekit.pipeline.export import PID

    if args[0] != "export":
        return []
    written = export_path(args[1])
    if not written.is_file():
        return [f"no export at {written.name}"]
    top = json.loads(gzip.decompress(written.read_bytes()), object_pairs_hook=lambda kv: kv)
    events = [v for k, v in top if k == "traceEvents"][-1]
    problems = []
    for e in (e for e in events if ("cat", "kernel") in e):
        args_ = [v for k, v in e if k == "args"]
        labels = [v for k, v in (args_[0] if len(args_) == 1 and isinstance(args_[0], list) else [])
                  if k == "tracekit_class"]
        if len(args_) != 1 or len(labels) != 1:
            problems.append(f"kernel event with {len(args_)} args and {len(labels)} labels: {str(e)[:200]}")
    ours = [e for e in events if ("name", "process_name") in e and isinstance(dict(e).get("pid"), int)
            and dict(e)["pid"] >= PID]
    return problems + ([] if len(ours) == 1 else [f"{len(ours)} tracekit processes"])


def export_cases() -> Iterator[Case]:
    """Traces `info` and `report` read that export once refused or wrote wrong: traceEvents under an
    escaped, a duplicated or an earlier nested key; kernel args as an escaped key, null or twice;
    a file exported already."""
    good = dumps(base_doc())
    events = good[good.index('"traceEvents": ') + len('"traceEvents": '):-1]
    decoy = '[{"ph": "X", "cat": "kernel", "name": "decoy", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]'
    kernel_args = '"args": {"device": 0, "stream": 7, "correlation": 100,'
    assert good.count(kernel_args) == 1
    texts = {
        "escaped_key": '{"schemaVersion": 1, "trace\\u0045vents": ' + events + "}",
        "duplicated_key": '{"traceEvents": ' + decoy + ', "schemaVersion": 1, "traceEvents": ' + events + "}",
        "nested_key": '{"meta": {"traceEvents": ' + decoy + '}, "schemaVersion": 1, "traceEvents": ' + events + "}",
        "args_escaped": good.replace(kernel_args, '"\\u0061rgs": {"device": 0, "stream": 7, "correlation": 100,'),
        "args_null": good.replace(kernel_args, '"args": null, "x": {"device": 0, "stream": 7, "correlation": 100,'),
        "args_twice": good.replace(kernel_args, '"args": {"old": 1}, ' + kernel_args),
    }
    for name, text in texts.items():
        yield Case(f"export:{name}", _writer(lambda t=text: t), commands=(("info",), ("export",)), expect=0,
                   verify=_export_once)

    def exported(folder: Path) -> tuple[Path, tuple[str, ...]]:
        src = folder / "first.json"
        src.write_text(good)
        once = folder / "once.json"
        code, _, err, _ = run_cli(["export", str(src), "-o", str(once), "-q"])
        assert code == 0, err
        src.unlink()
        return once, ()

    yield Case("export:exported_again", exported, commands=(("export",),), expect=0, verify=_export_once)


# How a rank's worker process dies: the call that kills it, run inside the worker.
DEATHS: dict[str, Callable[[], None]] = {
    "sigkill": lambda: os.kill(os.getpid(), signal.SIGKILL),  # what the OOM killer sends
    "sigsegv": lambda: (faulthandler.disable(), os.kill(os.getpid(), signal.SIGSEGV)),  # no dump from pytest's handler
    "sigterm": lambda: os.kill(os.getpid(), signal.SIGTERM),
    "exit": lambda: os._exit(3),
}


@contextlib.contextmanager
def dying_workers(name: str, how: str) -> Iterator[None]:
    """While held, the worker of every multi-rank command dies (DEATHS[how]) on the file called
    `name`. The pool is made to fork, so the patched functions reach the workers unpickled."""
    import multiprocessing

    import tracekit.pipeline.core as pipeline
    import tracekit.pipeline.info as info
    from tracekit import pool

    def wrap(real: Callable[[object], object]) -> Callable[[object], object]:
        def worker(task: object) -> object:
            if Path(str(getattr(task, "path", ""))).name == name:
                DEATHS[how]()
            return real(task)
        return worker

    saved = pipeline.analyze_rank_file, info.summarize_file, pool._context
    pipeline.analyze_rank_file = wrap(saved[0])  # type: ignore[assignment]
    info.summarize_file = wrap(saved[1])  # type: ignore[assignment]
    pool._context = lambda: multiprocessing.get_context("fork")
    try:
        yield
    finally:
        pipeline.analyze_rank_file, info.summarize_file, pool._context = saved  # type: ignore[assignment]


def _worker_cases() -> Iterator[Case]:
    """A 3-rank job whose rank1 worker dies: one error line naming rank1.json, or --keep-going."""
    def make(keep_going: bool) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def inner(folder: Path) -> tuple[Path, tuple[str, ...]]:
            job = folder / "job"
            job.mkdir()
            for k in range(3):
                (job / f"rank{k}.json").write_text(dumps(base_doc()))
            return job, ("-j", "2", *(["--keep-going"] if keep_going else []))
        return inner

    for how in DEATHS:
        yield Case(f"worker:{how}", make(False), expect=2, around=lambda h=how: dying_workers("rank1.json", h))
        yield Case(f"worker_keep_going:{how}", make(True), expect=0,
                   around=lambda h=how: dying_workers("rank1.json", h))


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_LISTENING: list[socket.socket] = []  # the silent servers of the scheduler cases
# --scheduler addresses Dask parses but cannot use here ({port}: a closed local port)
BAD_SCHEDULERS = {
    "closed_port": "tcp://127.0.0.1:{port}", "no_scheme_closed": "127.0.0.1:{port}",
    "port_out_of_range": "tcp://127.0.0.1:99999", "port_zero": "127.0.0.1:0", "ws_closed": "ws://127.0.0.1:{port}",
    "wss": "wss://127.0.0.1:{port}", "tls": "tls://127.0.0.1:{port}", "unknown_scheme": "foo://127.0.0.1:1",
    "no_host": "tcp://", "bad_port": "tcp://127.0.0.1:abc", "ipv6_unbracketed": ":::",
    "esc_in_address": "tcp://\x1b[31mred:{port}", "inproc_elsewhere": "inproc://192.0.2.1/1/1",
    "inproc_no_pid": "inproc://x",
}


def _scheduler_cases() -> Iterator[Case]:
    def make(address: str) -> Callable[[Path], tuple[Path, tuple[str, ...]]]:
        def inner(folder: Path) -> tuple[Path, tuple[str, ...]]:
            trace = folder / "t.json"
            trace.write_text(dumps(base_doc()))
            return trace, ("--scheduler", address.format(port=closed_port()))
        return inner

    for kind, address in BAD_SCHEDULERS.items():
        yield Case(f"scheduler:{kind}", make(address), expect=2, names_file=False)  # names the option

    def silent(folder: Path) -> tuple[Path, tuple[str, ...]]:
        """A port that accepts and never speaks (not a Dask scheduler): refused after 2 s."""
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        _LISTENING.append(server)  # open until the process ends
        trace = folder / "t.json"
        trace.write_text(dumps(base_doc()))
        return trace, ("--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}")

    yield Case("scheduler:silent_server", silent, expect=2, names_file=False)

    def spellings(folder: Path) -> tuple[Path, tuple[str, ...]]:
        """One rank file given as itself, through `..`, a symlink and a hard link (one rank)."""
        job = folder / "job"
        job.mkdir()
        (job / "rank0.json").write_text(dumps(base_doc()))
        (folder / "link.json").symlink_to(job / "rank0.json")
        os.link(job / "rank0.json", folder / "hard.json")
        return job, (str(job / ".." / "job" / "rank0.json"), str(folder / "link.json"), str(folder / "hard.json"))

    yield Case("inputs:one_file_four_spellings", spellings, expect=0)


def corpus() -> list[Case]:
    """Every generated case (the acceptance count is len(corpus()))."""
    return [*_file_cases(), *_value_cases(), *_output_cases(), *io_cases(), *export_cases(), *_worker_cases(),
            *_scheduler_cases()]


def digest(folder: Path) -> dict[str, str]:
    """Name -> sha256 of every file below `folder` (symlinks by target, FIFOs by name only)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir" if p.is_dir() else "special"
    return out


def run_cli(args: list[str]) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds) of tracekit's CLI run in this process."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def check_case(case: Case, folder: Path) -> list[str]:
    """Run every command of `case` on a fresh copy of its input; the list of broken promises."""
    problems = []
    for command in case.commands:
        work = folder / f"{case.name.replace('/', '_').replace(':', '_')[:60]}_{command[0]}"
        work.mkdir()
        path, extra = case.make(work)
        args = [*command, str(path), *extra]
        if command[0] == "report" and "-o" not in extra:
            args += ["-o", str(work / "out.html")]
        before = digest(work)
        try:
            with case.around() if case.around is not None else contextlib.nullcontext():
                code, out, err, seconds = run_cli(args)
        except BaseException as exc:
            problems.append(f"{case.name} {command[0]}: raised {type(exc).__name__}: {exc!s:.200}")
            continue
        label = f"{case.name} {command[0]} (exit {code})"
        after = digest(work)
        if code not in (0, 2) or (case.expect is not None and code != case.expect):
            problems.append(f"{label}: exit code; stderr {err[:300]!r}")
        if "Traceback" in err or "Traceback" in out:
            problems.append(f"{label}: traceback")
        if RAW_CONTROL.search(out) or RAW_CONTROL.search(err):
            problems.append(f"{label}: raw control character in output: {RAW_CONTROL.search(out + err)!r}")
        if re.search(r"^forged", f"{out}\n{err}", re.M):  # a name's newline printed raw starts a line
            problems.append(f"{label}: a file name forged a line: {out[:200]!r} {err[:200]!r}")
        if code == 2:
            lines = err.splitlines()
            if len(lines) != 1 or not lines[0].startswith("tracekit: error: "):
                problems.append(f"{label}: stderr is not one error line: {err[:300]!r}")
            elif case.names_file and not any(visible(p.name) in lines[0] for p in _named_paths(path, extra)):
                problems.append(f"{label}: error does not name the file: {lines[0][:200]!r}")
        for name, value in before.items():
            if after.get(name) != value:
                problems.append(f"{label}: input {name} changed or removed")
        new = sorted(set(after) - set(before))
        expected_new = [str(work / "out.html")] if command[0] == "report" and code == 0 and "-o" not in extra else []
        if command[0] == "report" and code == 0 and "-o" in extra:
            expected_new = new[:1] if len(new) == 1 and new[0].endswith(".html") else ["<one html file>"]
            if os.devnull in extra:  # written in place, nothing new beside it
                expected_new = []
        if command[0] in ("export", "diff") and code == 0:
            expected_new = _written(command[0], path, extra, work, before)
        if new != expected_new:
            problems.append(f"{label}: files left behind or missing: {new} (expected {expected_new})")
        for html in (Path(n) for n in new if n.endswith(".html")):
            text = html.read_text(encoding="utf-8")
            if "<script>alert(1)" in text:  # escaped: &lt;script&gt; in HTML, \u003cscript in tojson
                problems.append(f"{label}: a trace string reached the HTML unescaped")
        if seconds > SLOW_S:
            problems.append(f"{label}: took {seconds:.1f} s")
        if case.verify is not None:
            problems += [f"{label}: {p}" for p in case.verify(work, tuple(args), out, err)]
    return problems


def _named_paths(path: Path, extra: tuple[str, ...]) -> list[Path]:
    """The paths an error line may name: the input, a second input (diff's AFTER) and every option's path."""
    named = [path, *(Path(x) for x in extra[:1] if not x.startswith("-"))]
    named += [Path(v) for k, v in itertools.pairwise(extra) if k in ("-o", "--html", "--capture")]
    return [p for p in named if p.name]


def _written(command: str, path: Path, extra: tuple[str, ...], work: Path, before: dict[str, str]) -> list[str]:
    """The new file a successful export or diff leaves in `work`: its -o/--html target, or export's
    default (its first numbered name when that existed)."""
    from tracekit.output import numbered
    from tracekit.paths import export_path

    given = [Path(v) for k, v in itertools.pairwise(extra) if k in ("-o", "--html")]
    if not given:
        default = export_path(path)
        return [str(numbered(default, 1) if str(default) in before else default)] if command == "export" else []
    return [str(given[0])] if given[0].parent == work and given[0].is_file() else []


BULK = ("event:", "args:", "inductor:")  # one hostile value per field: CI takes every 10th


def ci_corpus() -> list[Case]:
    """The share CI runs (benchmarks/fuzz_corpus.py runs all): every case that is not a bulk value
    mutation plus every 10th of those; `info` and `analyze --json` on all of them, the HTML report
    too on every 9th (the report takes ~0.4 s per run). With `info` alone on most of them, 40
    analyze/report tracebacks on op thread ids of mixed types went unseen here."""
    cases = corpus()
    chosen = [c for c in cases if not c.name.startswith(BULK)] + [c for c in cases if c.name.startswith(BULK)][::10]
    return [c if i % 9 == 0 or c.commands != COMMANDS else replace(c, commands=COMMANDS[:2])
            for i, c in enumerate(chosen)]


def test_corpus_is_large_enough() -> None:
    cases = corpus()
    assert len(cases) >= 500, len(cases)
    assert len({c.name for c in cases}) == len(cases)
    assert len(ci_corpus()) >= 500


def test_op_thread_ids_that_do_not_compare(tmp_path: Path) -> None:
    """Op tids of mixed types (a string and a null beside numbers) once raised TypeError in analyze
    and report (the foreach pass sorted ops by tid); CI's share ran only `info` on those cases."""
    doc = base_doc()
    ops = [e for e in doc["traceEvents"] if e["cat"] == "cpu_op"]
    ops[0]["tid"], ops[1]["tid"] = "", None
    trace = tmp_path / "t.json"
    trace.write_text(dumps(doc))
    code, out, err, _ = run_cli(["analyze", "--json", str(trace)])
    assert code == 0 and err == "", err
    # base_doc: 4 kernels of 30 us and 2 copies of 5 us, whichever op they are attributed to
    assert sum(k["time_us"] for k in json.loads(out)["kernels"]) == 4 * 30 + 2 * 5
    code, _, err, _ = run_cli(["report", str(trace), "-o", str(tmp_path / "r.html")])
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("shard", range(4))
def test_corpus_never_breaks_a_promise(shard: int, tmp_path: Path) -> None:
    """The CI share, in four shards; the failure message lists every broken promise at once."""
    problems: list[str] = []
    for case in ci_corpus()[shard::4]:
        problems += check_case(case, tmp_path)
    assert not problems, "\n".join(problems[:40])
