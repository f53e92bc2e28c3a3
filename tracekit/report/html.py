"""Render the report view model to one self-contained HTML string with a cached jinja2 environment."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import sys
from pathlib import Path

import jinja2
from markupsafe import Markup

from tracekit.report.context import ReportView

TEMPLATE = "report.html.j2"
ASSETS = ("report.css", "report.js")


def _loader() -> jinja2.BaseLoader:
    """The templates/ folder of the source checkout this tracekit was imported from, when there is
    one (so that a checkout never renders another checkout's templates), else the installed
    `tracekit.templates` package."""
    source = Path(__file__).resolve().parents[2] / "templates"
    if (source / TEMPLATE).is_file():
        return jinja2.FileSystemLoader(source)
    return jinja2.PackageLoader("tracekit.templates", ".")


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """jinja2's compiled templates kept between runs, as Python keeps its bytecode: jinja2's per-user
    0700 folder in the temp directory (it refuses one another user owns), each entry used only while
    its template's source is unchanged. A cache that cannot be read or written costs a compile, never
    the report."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a truncated or foreign file: compile as without a cache
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):  # a full or read-only temp directory
            super().dump_bytecode(bucket)


def template_cache(directory: str | None = None) -> jinja2.BytecodeCache | None:
    """The compiled-template cache, or None when Python is told not to write bytecode
    (PYTHONDONTWRITEBYTECODE, -B) or no safe folder can be had."""
    if sys.dont_write_bytecode:
        return None
    try:
        return TemplateCache(directory, pattern="tracekit-%s.cache")
    except (OSError, RuntimeError):
        return None


@functools.cache
def environment() -> jinja2.Environment:
    """The one jinja2 environment: package templates, autoescape everywhere, strict undefined."""
    env = jinja2.Environment(
        loader=_loader(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        bytecode_cache=template_cache(),
    )
    env.policies["json.dumps_kwargs"] = {"separators": (",", ":"), "allow_nan": False}
    return env


@functools.cache
def asset(name: str) -> str:
    """The text of an inline asset (CSS/JS) shipped with the templates, read once."""
    env = environment()
    source, _, _ = env.loader.get_source(env, name)  # type: ignore[union-attr]
    return source


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render(view: ReportView) -> str:
    """The report HTML; its Content-Security-Policy allows only the inline script it ships (by hash)."""
    css, js = (asset(n) for n in ASSETS)
    return environment().get_template(TEMPLATE).render(
        view=view,
        css=Markup(css),
        js=Markup(js),
        script_hash=_sha256(js),
    )
