"""Shrinks a recorded sample trace below the repository's 5 MB file limit without changing what tracekit reads from it: drops the `ac2g` flow events (the launches carry their correlation ids) and the cpu_ops' `Ev Idx` and `Record function id` args (tracekit/trace/args.py keeps them out of every column), writes compact JSON, gzip level 9. Check `tracekit analyze --json` before and after.

    python benchmarks/trim_trace.py IN.trace.json.gz OUT.trace.json.gz
"""

import gzip
import json
import sys

UNREAD_ARGS = ("Ev Idx", "Record function id")


def main(src: str, dst: str) -> None:
    with gzip.open(src) as f:
        doc = json.load(f)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "ac2g"]
    for e in doc["traceEvents"]:
        args = e.get("args")
        if isinstance(args, dict):
            for key in UNREAD_ARGS:
                args.pop(key, None)
    data = json.dumps(doc, separators=(",", ":")).encode()
    with open(dst, "wb") as f:
        f.write(gzip.compress(data, compresslevel=9, mtime=0))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
