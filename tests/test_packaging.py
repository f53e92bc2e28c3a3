"""Packaging: every package is installed, templates ship inside the package, extras stay light."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def test_every_package_is_listed_in_setup_cfg():
    listed = set(_cfg()["options"]["packages"].split())
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tracekit").rglob("__init__.py")}
    assert found | {"tracekit.templates"} == listed


def test_templates_import_as_a_package():
    import tracekit.templates

    assert Path(tracekit.templates.__file__).parent.resolve() == (ROOT / "templates").resolve()


def test_default_install_is_light():
    requires = _cfg()["options"]["install_requires"].split()
    names = {r.split(">")[0].split("=")[0].split("<")[0] for r in requires}
    assert names == {"click", "pandas", "jinja2", "msgspec"}
