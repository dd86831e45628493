"""`uv pip install` with this machine's pip configuration, for the Makefile's venvs: uv installs in a third of pip's
time, but reads none of pip's settings (indexes, find-links, constraints, certificates). Exits 3 without installing
when pip is configured with a setting it does not translate: the Makefile then installs with pip.

    python dev/uv_install.py UV PYTHON [PACKAGE...]
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

# pip's setting -> uv's option; values may hold several, space-separated.
OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "constraint": "--constraint"}
# Settings that change nothing uv would install.
IGNORED = {"default-timeout", "timeout", "disable-pip-version-check", "progress-bar", "no-cache-dir", "cache-dir",
           "root-user-action", "quiet", "verbose", "no-input", "no-color", "retries"}
# pip's precedence: its environment variables, then the [install] section of its files, then [global] (`pip config
# list` shows the files already merged).
SECTIONS = (":env:", "install", "global")


def pip_settings(python: str) -> dict[str, str]:
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    found: dict[tuple[int, str], str] = {}
    for line in listing.splitlines():
        match = re.fullmatch(r"(\S+?)\.([\w-]+)='(.*)'", line.strip())
        if match and match[1] in SECTIONS:
            found[SECTIONS.index(match[1]), match[2]] = match[3]
    settings: dict[str, str] = {}
    for (_, key), value in sorted(found.items(), reverse=True):
        settings[key] = value  # the last written wins: the highest precedence
    return settings


def main(argv: list[str]) -> int:
    uv, python, *packages = argv
    settings = pip_settings(python)
    unknown = sorted(set(settings) - set(OPTIONS) - IGNORED - {"cert"})
    if unknown:
        print(f"uv_install: pip is configured with {', '.join(unknown)}, which uv is not given: installing with pip")
        return 3
    args = [uv, "pip", "install", "--quiet", "--python", python, "--compile-bytecode",
            "--index-strategy", "unsafe-best-match"]  # as pip: the best version from all indexes, not the first
    for key, option in OPTIONS.items():
        for value in shlex.split(settings.get(key, "")):
            args += [option, value]
    env = dict(os.environ)
    if "cert" in settings:
        env["SSL_CERT_FILE"] = settings["cert"]
    return subprocess.run([*args, *packages], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
