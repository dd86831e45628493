"""The README's `curl` line, run exactly as written (only the address is the test server's) against
the real embedded Triton: no client library, the JPEG in, the top-5 labels out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.client.conftest import PHOTO
from tests.conftest import run_cli

README = Path(__file__).resolve().parent.parent / "README.md"
ADDRESS = "localhost:8000"  # where the README's line expects `tritonize serve`


def readme_curl_line() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines() if "curl " in line]
    assert len(lines) == 1, f"the README should show one curl command, found {lines}"
    return lines[0]


def test_the_readme_curl_line_prints_the_top5_labels(small_server, tmp_path):
    missing = [tool for tool in ("base64", "jq", "curl") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the README's curl line needs {', '.join(missing)} (apt-get install {' '.join(missing)})")
    line = readme_curl_line()
    assert ADDRESS in line and "goldfish.jpg" in line
    shutil.copy(PHOTO, tmp_path / "goldfish.jpg")
    command = line.replace(ADDRESS, small_server.http_url.removeprefix("http://"))
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    # The same five as the gRPC client's, through the same ensemble.
    report = json.loads(run_cli("client", "classify", tmp_path / "goldfish.jpg", "--model", "onnx_model", "--json",
                                "--url", small_server.grpc_url).stdout)
    expected = [(t["index"], t["label"]) for t in report["predictions"][0]["top_k"]]
    assert [(int(index), label) for _, index, label in (p.split(":", 2) for p in printed)] == expected
