"""Readable kernel names: a small Itanium demangler for the common cases and the short display name."""

from __future__ import annotations

import re

GENERIC_KERNEL_NAMES = frozenset({"Kernel", "Kernel2", "kernel", "device_kernel", "kernel_entry"})
MAX_TITLE = 300  # hover text of a kernel name, in characters (demangled C++ names run to thousands)

_IDENT = re.compile(r"[A-Za-z_][\w:]*")
_SIGNATURE = re.compile(r"\A[A-Za-z_][\w:]*(?:<[^()]*>)?\(")  # 'name(' or 'name<...>(': a C++ function signature (anchored: linear)
_BUILTIN_TYPES = frozenset({"int", "long", "unsigned", "short", "char", "bool", "float", "double", "half", "void"})
_MANGLED = re.compile(r"_Z[LN]?\d|_ZN")
_CV = "rVK"  # restrict/volatile/const qualifiers before a nested name


def _source_name(s: str, i: int) -> tuple[str, int] | None:
    """'<length><identifier>' at i -> (identifier, next position)."""
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j == i:
        return None
    n = int(s[i:j])
    if n <= 0 or j + n > len(s):
        return None
    return s[j : j + n], j + n


def _skip_args(s: str, i: int) -> int:
    """Position after the group that opens at i: a template-argument list 'I ... E', a nested name
    'N ... E', an argument pack 'J ... E', a function type 'F ... E' or an expression 'X ... E'."""
    depth, i = 0, i
    while i < len(s):
        c = s[i]
        if c.isdigit():
            name = _source_name(s, i)
            if name is None:
                return len(s)
            i = name[1]
            continue
        if c == "S" or c == "T":  # substitution / template parameter: S_, S0_, St, Sa, T_, T1_
            j = i + 1
            if j < len(s) and s[j].islower():
                i = j + 1
                continue
            while j < len(s) and (s[j].isdigit() or s[j].isupper()) and s[j] != "_":
                j += 1
            i = j + 1
            continue
        if c == "D":  # builtin types DF16b (std::bfloat16_t), DF16_, Dh, Dn, ...; Dt/DT decltype(...) E
            if s[i + 1:i + 2] in ("t", "T"):
                depth += 1
                i += 2
                continue
            j = i + 2
            if s[i + 1:i + 2] == "F":
                while j < len(s) and s[j].isdigit():
                    j += 1
                j += 1 if s[j:j + 1] in ("b", "_", "x") else 0
            i = j
            continue
        if c == "L":  # literal: L <type> <value> E, or L _Z <encoding> E (an address)
            if s[i + 1:i + 3] == "_Z":
                depth += 1
                i += 3
                continue
            j = i + 1
            if s[j:j + 1] == "N":
                j = _skip_args(s, j)
            elif s[j:j + 1].isdigit():
                j = (_source_name(s, j) or ("", len(s)))[1]
            end = s.find("E", j)
            i = len(s) if end < 0 else end + 1
            if depth == 0:
                return i
            continue
        if c in "INXJF":
            depth += 1
        elif c == "E":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(s)


def demangle(name: str) -> str:
    """The qualified function name of an Itanium-mangled symbol ('_ZN2at6native4gemmIfEEvPf' ->
    'at::native::gemm<…>(…)'); any other name unchanged. Types of the parameters are not spelled out."""
    if not name.startswith("_Z") or not _MANGLED.match(name):
        return name
    i = 2
    if name[i] == "L":  # internal linkage
        i += 1
    parts: list[str] = []
    templated = False
    if name[i] == "N":
        i += 1
        while i < len(name) and name[i] in _CV:
            i += 1
        while i < len(name) and name[i] != "E":
            if name[i] == "I":
                i = _skip_args(name, i)
                templated = True
                continue
            if name[i] == "S" and i + 1 < len(name) and name[i + 1] == "t":
                parts.append("std")
                i += 2
                continue
            got = _source_name(name, i)
            if got is None:
                return name
            parts.append(got[0])
            i = got[1]
            templated = False
    else:
        got = _source_name(name, i)
        if got is None:
            return name
        parts.append(got[0])
        i = got[1]
        templated = i < len(name) and name[i] == "I"
    if not parts:
        return name
    parts = ["(anonymous namespace)" if p.startswith("_GLOBAL__N") else p for p in parts]
    return "::".join(parts) + ("<…>" if templated else "") + "(…)"


def _depth0(name: str) -> tuple[str, dict[int, str]]:
    """The name with <...> and (...) groups removed, and {position: text} of each removed <...> group."""
    out: list[str] = []
    groups: dict[int, str] = {}
    depth, start = 0, 0
    arg: list[str] = []
    for ch in name:
        if ch in "<(":
            if depth == 0:
                start, arg = len(out), []
            depth += 1
            if depth == 1:
                continue
        elif ch in ">)" and depth > 0:
            depth -= 1
            if depth == 0:
                if ch == ">":
                    groups[start] = "".join(arg)
                continue
        if depth == 0:
            out.append(ch)
        else:
            arg.append(ch)
    return "".join(out), groups


def short_name(name: str) -> str:
    """A readable kernel name: no return type, namespaces, template arguments or parameter lists.

    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' -> 'vectorized_elementwise_kernel';
    mangled names are demangled first; generic names keep what tells them apart:
    'Kernel2<cutlass_80_tensorop_s1688gemm_...>' (an identifier as first template argument) or
    'gemvx::kernel' (the enclosing namespace).
    """
    name = demangle(name)
    if "::" not in name and not name.startswith("void ") and not _SIGNATURE.match(name):
        return name
    text, groups = _depth0(name)
    text = text.rstrip()
    if not text:
        return name
    qualified = text.split()[-1]  # after any return type ('void', 'std::enable_if<...>::type')
    parts = [p for p in qualified.split("::") if p]
    if not parts:
        return name
    base = parts[-1]
    if base in GENERIC_KERNEL_NAMES:
        first = groups.get(len(text), "").split(",")[0].strip()
        if _IDENT.fullmatch(first) and first not in _BUILTIN_TYPES:
            return f"{base}<{first.rsplit('::', 1)[-1]}>"
        if len(parts) > 1:
            return f"{parts[-2]}::{base}"
    return base


def hover_name(name: str) -> str:
    """The full name for a hover title (demangled when mangled, capped at MAX_TITLE characters)."""
    full = demangle(name)
    if full != name:
        full = f"{full}  [{name}]"
    return full if len(full) <= MAX_TITLE else full[: MAX_TITLE - 1] + "…"
