"""Terminal safety: trace-derived text and file names made visible before they reach stdout/stderr."""

from __future__ import annotations

import re

# C0 controls (newline and escape included), DEL, C1 controls, lone surrogates (undecodable bytes of
# a file name), line/paragraph separators, bidirectional overrides and isolates, BOM.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` as one line with every control character written as an escape (ESC -> \\x1b,
    newline -> \\x0a), so that a name cannot move the cursor, recolour or forge lines."""
    s = str(text)
    return _UNSAFE.sub(_escape, s) if _UNSAFE.search(s) else s


def visible_lines(text: object) -> str:
    """`text` with every line made `visible` and the newlines between them kept: what a command
    prints to a terminal (a report's text, a table) goes through here or through `visible`."""
    return "\n".join(visible(line) for line in str(text).split("\n"))
