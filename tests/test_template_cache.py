"""The compiled-template cache of the report (report/html.py): used between runs, never trusted over the template source, and never able to fail a report."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jinja2
import pytest

from tracekit.report import html

SOURCE = "{% for x in xs %}<b>{{ x }}</b>{% endfor %}"
EXPECTED = "<b>a&lt;</b><b>1</b><b>2.5</b>"  # by hand: each item in <b>, the text escaped


@pytest.fixture
def writes_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Python runs by default (this machine may set PYTHONDONTWRITEBYTECODE)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def _env(cache: jinja2.BytecodeCache | None, source: str = SOURCE) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.DictLoader({"t.j2": source}), autoescape=True, bytecode_cache=cache)


def _counted(env: jinja2.Environment) -> list[object]:
    """The calls of env.compile from here on."""
    calls: list[object] = []
    original = env.compile
    env.compile = lambda *a, **k: calls.append(a) or original(*a, **k)  # type: ignore[method-assign]
    return calls


def _render(env: jinja2.Environment) -> str:
    return env.get_template("t.j2").render(xs=["a<", 1, 2.5])


def test_a_second_run_loads_what_the_first_compiled(writes_bytecode: None, tmp_path: Path) -> None:
    cache = html.template_cache(str(tmp_path))
    assert isinstance(cache, html.TemplateCache)
    assert _render(_env(cache)) == EXPECTED
    assert [p.name.startswith("tracekit-") for p in tmp_path.iterdir()] == [True]
    env = _env(cache)
    calls = _counted(env)
    assert _render(env) == EXPECTED and calls == []  # loaded, not compiled
    changed = _env(cache, SOURCE.replace("<b>", "<i>").replace("</b>", "</i>"))
    calls = _counted(changed)
    assert _render(changed) == EXPECTED.replace("b>", "i>") and len(calls) == 1  # a changed source compiles


def test_a_broken_entry_is_compiled_again(writes_bytecode: None, tmp_path: Path) -> None:
    cache = html.template_cache(str(tmp_path))
    _render(_env(cache))
    (entry,) = tmp_path.iterdir()
    good = entry.read_bytes()
    for broken in (good[:9], good[:len(good) // 2], good[:6] + os.urandom(64), b""):  # truncated, garbage
        entry.write_bytes(broken)
        env = _env(cache)
        calls = _counted(env)
        assert _render(env) == EXPECTED and len(calls) == 1


def test_an_unwritable_cache_costs_a_compile_not_the_report(writes_bytecode: None, tmp_path: Path) -> None:
    cache = html.template_cache(str(tmp_path / "missing" / "folder"))  # every write fails: no such folder
    assert cache is not None
    assert _render(_env(cache)) == _render(_env(cache)) == EXPECTED


def test_no_cache_when_python_writes_no_bytecode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert html.template_cache(str(tmp_path)) is None
