"""Import-layer contract: data flows one way (docs/design.md), read from every module's imports;
and no module over 400 lines.

trace <- analyzers <- model <- suggestions <- compare <- report <- pipeline <- cli / profile: a module imports only
from its own layer or layers to its left. Imports inside functions count too (a lazy import is
still a dependency). cli/ and profile/ reach the analyzers and the rules only through the
pipeline. Third-party: torch/triton only in profile/, HTA only in hta_compat.py, dask
only in one executor module, jinja2 only in report/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tracekit"

# Layer of each top-level part of the package (module or subpackage), lowest first. Layer 0 holds
# helpers every layer may use (they import no other part of tracekit).
LAYERS: dict[str, int] = {
    "_version": 0, "_startup": 0, "errors": 0, "units": 0, "jsonsafe": 0, "terminal": 0, "paths": 0,
    "output": 0,  # the atomic writer: the report, the pipeline's export and profile/ write through it
    "trace": 1,
    "analyzers": 2, "hta_compat": 2,
    "model": 3,  # the execution model: step graph, replay, projection (reads the trace and the step plan)
    "suggestions": 4,
    "compare": 5,  # diff: two analyses and the first one's suggestions
    "report": 6, "templates": 6,
    "pipeline": 7, "executor": 7, "pool": 7,
    "profile": 8, "cli": 8,
    "__main__": 9,
}
# Pairs in one layer that still must not import each other.
FORBIDDEN_SAME_LAYER = {("profile", "cli")}
# Lower layers a part must not reach past the one below it: the report renders analyzer results,
# never the raw trace.
SKIPS_FORBIDDEN = {("report", "trace")}
# The package root is the public API (lazy attributes): nothing inside imports it.
ROOT = "__init__"

THIRD_PARTY: dict[str, tuple[str, ...]] = {
    # module: parts of tracekit allowed to import it (module paths relative to tracekit/)
    "torch": ("profile/",),
    "triton": ("profile/",),
    "hta": ("hta_compat.py",),
    "dask": ("executor.py",),  # the one executor module, wherever it lives
    "distributed": ("executor.py",),
    "jinja2": ("report/",),
}

# Known violations, each waiting for a change on another branch (remove the entry when it lands;
# test_known_violations_are_still_violations fails once an entry is no longer needed).
KNOWN: set[tuple[str, str]] = set()


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of every module `path` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _name(path).split(".") if path.name == "__init__.py" else _name(path).split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            # `from tracekit.x import y` may import submodule y: count it as tracekit.x.y too
            out.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return out


def _part(name: str) -> str | None:
    """The top-level part of tracekit a module name belongs to ('' for the root), None outside."""
    parts = name.split(".")
    if parts[0] != "tracekit":
        return None
    return parts[1] if len(parts) > 1 else ""


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel).is_dir()


def violations() -> set[tuple[str, str]]:
    """(importing module, imported module) pairs that break the contract."""
    found: set[tuple[str, str]] = set()
    for path in _modules():
        me = _name(path)
        mine = _part(me)
        rel = path.relative_to(PACKAGE).as_posix()
        for target in _imports(path):
            top = target.split(".")[0]
            if top in THIRD_PARTY and not any(rel.startswith(a) or rel.endswith("/" + a) or rel == a
                                              for a in THIRD_PARTY[top]):
                found.add((me, top))
            theirs = _part(target)
            if theirs is None or not mine or theirs == mine:
                continue
            if theirs == "":
                if target == "tracekit":
                    found.add((me, "tracekit"))  # the root: import from the module that defines it
                continue
            if not _is_module(target):
                continue  # a name imported from a module, already counted as that module
            if theirs not in LAYERS or mine not in LAYERS:
                found.add((me, f"{target} (part not in LAYERS)"))
            elif (LAYERS[theirs] > LAYERS[mine] or (mine, theirs) in FORBIDDEN_SAME_LAYER
                  or (mine, theirs) in SKIPS_FORBIDDEN):
                found.add((me, target))
    return found


def test_every_part_has_a_layer():
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()}
    assert parts - {ROOT} <= set(LAYERS), "add the new part to LAYERS"


def test_imports_flow_one_way():
    assert sorted(violations() - KNOWN) == []


def test_known_violations_are_still_violations():
    assert sorted(KNOWN - violations()) == []


def test_the_contract_catches_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: an analyzer importing the report is reported (so the test can fail)."""
    fake = tmp_path / "tracekit"
    (fake / "analyzers").mkdir(parents=True)
    (fake / "report").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "report" / "__init__.py").write_text("")
    (fake / "analyzers" / "__init__.py").write_text("")
    (fake / "analyzers" / "bad.py").write_text(
        "def f():\n    from tracekit.report import html\n    import torch\n")
    (fake / "report" / "html.py").write_text("import jinja2\nfrom ..trace import tables\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", fake)
    assert violations() == {("tracekit.analyzers.bad", "tracekit.report"),
                            ("tracekit.analyzers.bad", "tracekit.report.html"),
                            ("tracekit.analyzers.bad", "torch")}


MAX_LINES = 400
# Modules still over MAX_LINES, each being split on another branch (remove the entry when it lands).
KNOWN_LONG: set[str] = set()


def _long_modules() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in _modules()
            if len(p.read_text(encoding="utf-8").splitlines()) > MAX_LINES}


def test_no_module_over_400_lines():
    assert sorted(_long_modules() - KNOWN_LONG) == []


def test_known_long_modules_are_still_long():
    assert sorted(KNOWN_LONG - _long_modules()) == []


# Commands and profile/ reach analysis through the pipeline (tracekit.pipeline.local, .compare, .reports;
# the types they name from tracekit.pipeline.types), never the analyzers or the rules directly.
DIRECT_ANALYSIS = ("analyzers", "suggestions")
THROUGH_PIPELINE = ("cli/", "profile/")
# Known direct imports, each waiting for a change on another branch (remove the entry when it lands;
# test_known_direct_imports_are_still_there fails once one is gone).
KNOWN_DIRECT: set[tuple[str, str]] = set()


def direct_analysis_imports() -> set[tuple[str, str]]:
    """(module under cli/ or profile/, analyzers or suggestions module it imports) pairs, lazy and
    TYPE_CHECKING imports included."""
    found: set[tuple[str, str]] = set()
    for path in _modules():
        if not path.relative_to(PACKAGE).as_posix().startswith(THROUGH_PIPELINE):
            continue
        for target in _imports(path):
            if _part(target) in DIRECT_ANALYSIS and _is_module(target):
                found.add((_name(path), target))
    return found


def test_commands_and_profile_import_the_pipeline_not_analyzers():
    assert sorted(direct_analysis_imports() - KNOWN_DIRECT) == []


def test_known_direct_imports_are_still_there():
    assert sorted(KNOWN_DIRECT - direct_analysis_imports()) == []


def test_the_pipeline_contract_catches_a_lazy_import(tmp_path, monkeypatch):
    """The checker itself: a command importing the rules inside a function, or an analyzer type under
    TYPE_CHECKING, is reported; the same names through the pipeline are not."""
    fake = tmp_path / "tracekit"
    for part in ("cli", "analyzers", "suggestions", "pipeline"):
        (fake / part).mkdir(parents=True)
        (fake / part / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "analyzers" / "analysis.py").write_text("")
    (fake / "pipeline" / "types.py").write_text("from tracekit.analyzers.analysis import Analysis\n")
    (fake / "cli" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracekit.analyzers.analysis import Analysis\n"
        "def f():\n    from tracekit.suggestions import suggest\n")
    (fake / "cli" / "good.py").write_text("from tracekit.pipeline.types import Analysis\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", fake)
    assert direct_analysis_imports() == {("tracekit.cli.bad", "tracekit.analyzers.analysis"),
                                         ("tracekit.cli.bad", "tracekit.suggestions")}


# Parameters annotated with a bare Any (Any, Any | None, Sequence[Any], list[Any], ...): where a tracekit
# type is meant, the signature must name it. What is left: a user callable's *args / **kwargs passed
# through (profile_callable) and one pandas itertuples row (report.charts).
BARE_ANY = re.compile(r"(Any|Any \| None|None \| Any|Optional\[Any\]|"
                      r"(Sequence|list|tuple|Iterable|Iterator|set|frozenset)\[Any(, \.\.\.)?\])")
MAX_BARE_ANY_PARAMETERS = 3


def bare_any_parameters(root: Path = PACKAGE) -> list[str]:
    """'module:function(parameter)' for each parameter under `root` annotated with a bare Any."""
    found = []
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                    if arg.annotation is not None and BARE_ANY.fullmatch(ast.unparse(arg.annotation)):
                        found.append(f"{path.relative_to(root).as_posix()}:{node.name}({arg.arg})")
    return found


def test_no_any_where_a_tracekit_type_is_meant():
    found = bare_any_parameters()
    assert len(found) <= MAX_BARE_ANY_PARAMETERS, found


def test_bare_any_counter_sees_every_form(tmp_path):
    (tmp_path / "m.py").write_text(
        "from typing import Any\n"
        "def f(a: Any, b: Any | None, *c: Any, d: list[Any], e: dict[str, Any], **g: Any) -> None: ...\n",
        encoding="utf-8")
    assert bare_any_parameters(tmp_path) == ["m.py:f(a)", "m.py:f(b)", "m.py:f(d)", "m.py:f(c)", "m.py:f(g)"]
