"""dev/uv_install.py, the Makefile's venv install: uv is given pip's configuration as pip would read it, and a setting
it cannot translate leaves the install to pip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "dev" / "uv_install.py"


def _run(tmp_path, pip_config: str) -> tuple[int, str, dict | None]:
    """uv_install with a python whose `pip config list` prints `pip_config`, and a uv that records its call."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\ncat <<'EOF'\n{pip_config}\nEOF\n")
    uv = tmp_path / "uv"
    uv.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                  f"json.dump({{'argv': sys.argv[1:], 'cert': os.environ.get('SSL_CERT_FILE')}}, "
                  f"open({str(tmp_path / 'called.json')!r}, 'w'))\n")
    python.chmod(0o755)
    uv.chmod(0o755)
    done = subprocess.run([sys.executable, str(SCRIPT), str(uv), str(python), "-e", ".[dev]"], capture_output=True,
                          text=True, timeout=60)
    called = tmp_path / "called.json"
    return done.returncode, done.stdout, json.loads(called.read_text()) if called.exists() else None


def test_pips_indexes_find_links_constraints_and_certificate_reach_uv_with_pips_precedence(tmp_path):
    code, _, called = _run(tmp_path, "\n".join([
        ":env:.find-links='/opt/wheels'",
        ":env:.default-timeout='180'",
        "global.find-links='/elsewhere'",  # the environment's wins, as in pip
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.index-url='https://global.example/simple'",
        "install.index-url='https://install.example/simple'",  # [install] before [global]
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "download.index-url='https://download.example/simple'",  # another command's: not pip install's
    ]))
    assert code == 0
    argv = called["argv"]
    assert argv[:3] == ["pip", "install", "--quiet"] and argv[-2:] == ["-e", ".[dev]"]
    pairs = list(zip(argv, argv[1:]))
    assert ("--index-strategy", "unsafe-best-match") in pairs and "--compile-bytecode" in argv
    assert ("--find-links", "/opt/wheels") in pairs and "/elsewhere" not in argv
    assert ("--index-url", "https://install.example/simple") in pairs
    assert "https://global.example/simple" not in argv and "https://download.example/simple" not in argv
    assert [v for k, v in pairs if k == "--extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert called["cert"] == "/etc/ssl/certs/ca-certificates.crt"


def test_a_setting_uv_is_not_given_leaves_the_install_to_pip(tmp_path):
    code, out, called = _run(tmp_path, "global.trusted-host='pypi.internal'\nglobal.find-links='/opt/wheels'")
    assert code == 3 and called is None
    assert "pip is configured with trusted-host, which uv is not given: installing with pip" in out
