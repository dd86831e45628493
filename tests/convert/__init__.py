"""Tests of the convert stage."""

from __future__ import annotations

from dataclasses import fields


def build_job(**kw):
    """A BuildJob from flat keywords: the builder settings among them (workspace_mib, opt_level, ...) go to its one
    settings record (tritonize/plan_settings.py)."""
    from tritonize.convert.trtexec import BuildJob
    from tritonize.plan_settings import BuildSettings

    names = {f.name for f in fields(BuildSettings)}
    settings = BuildSettings(**{k: kw.pop(k) for k in list(kw) if k in names})
    return BuildJob(**kw, settings=settings)
