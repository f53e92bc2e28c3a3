"""Write a large trace for benchmarks by repeating a real trace's events, shifted in time.

usage: python benchmarks/make_big_trace.py SOURCE OUT.json[.gz] [--mb 66]

Each copy shifts ts by the source's span and offsets correlation / External id / flow ids, so the
result links like a long recording of the same program. Prints the raw size written.
"""

from __future__ import annotations

import argparse
import gzip
import json

ID_KEYS = ("correlation", "External id", "external id")


def shifted(event: dict, dt: float, did: int) -> dict:
    e = dict(event)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + dt
    args = e.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key in ID_KEYS:
            if isinstance(args.get(key), int):
                args[key] += did
        e["args"] = args
    if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
        e["id"] += did
    return e


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--mb", type=float, default=66.0, help="target raw JSON size in MB")
    args = parser.parse_args()
    opener = gzip.open if args.source.endswith(".gz") else open
    with opener(args.source, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    body = [e for e in events if e.get("ph") != "M"]
    times = [e["ts"] for e in body if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1000.0
    per_copy = len(json.dumps(body))
    copies = args.mb * 1e6 / per_copy
    out = [e for e in events if e.get("ph") == "M"]
    i = 0
    while i < copies:  # whole copies, then the first part of one more to reach the size
        share = min(1.0, copies - i)
        out.extend(shifted(e, i * span, i * 10_000_000) for e in body[: int(len(body) * share)])
        i += 1
    doc["traceEvents"] = out
    text = json.dumps(doc)
    writer = gzip.open if args.out.endswith(".gz") else open
    with writer(args.out, "wt") as fh:
        fh.write(text)
    print(f"wrote {args.out}: {copies:.2f} copies of {len(body)} events, {len(text) / 1e6:.1f} MB raw JSON")


if __name__ == "__main__":
    main()
