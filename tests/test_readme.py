"""The front door: README.md stays short and every link in it and in docs/ resolves; the `curl` line of the
preprocessing page (linked from the README), run exactly as written (only the address is the test server's) against
the real embedded Triton: no client library, the JPEG in, the top-5 labels out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CURL_PAGE = ROOT / "docs" / "preprocessing.md"  # the README links it for the curl example
ADDRESS = "localhost:8000"  # where the README's line expects `tritonize serve`


def readme_curl_line() -> str:
    assert "(docs/preprocessing.md)" in README.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", CURL_PAGE.read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines() if "curl " in line]
    assert len(lines) == 1, f"{CURL_PAGE.name} should show one curl command, found {lines}"
    return lines[0]


def test_the_readme_curl_line_prints_the_top5_labels(small_server, tmp_path):
    missing = [tool for tool in ("base64", "jq", "curl") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the README's curl line needs {', '.join(missing)} (apt-get install {' '.join(missing)})")
    line = readme_curl_line()
    assert ADDRESS in line and "goldfish.jpg" in line
    shutil.copy(ROOT / "goldfish.jpg", tmp_path / "goldfish.jpg")  # the one in the checkout
    command = line.replace(ADDRESS, small_server.http_url.removeprefix("http://"))
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    # The same five as the gRPC client's, through the same ensemble.
    report = json.loads(run_cli("client", "classify", tmp_path / "goldfish.jpg", "--model", "onnx_model", "--json",
                                "--url", small_server.grpc_url).stdout)
    expected = [(t["index"], t["label"]) for t in report["predictions"][0]["top_k"]]
    assert [(int(index), label) for _, index, label in (p.split(":", 2) for p in printed)] == expected


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(pages: list[Path], root: Path = ROOT) -> list[str]:
    """Every relative link (file and #anchor) in `pages` that does not resolve."""
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(root)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in {
                    _anchor(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}:
                broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def test_the_readme_is_a_front_door_and_every_link_resolves(tmp_path):
    assert len(README.read_text().splitlines()) <= 150
    assert broken_links([README, *sorted((ROOT / "docs").glob("*.md"))]) == []
    # the checker is not vacuous: a missing page and a missing heading are named
    (tmp_path / "page.md").write_text("# Title\n[a](nope.md) [b](#title) [c](#nowhere)\n")
    found = [line.split(": ", 1)[1] for line in broken_links([tmp_path / "page.md"], tmp_path)]
    assert found == ["nope.md (no such file)", "#nowhere (no such heading)"]


def test_the_readmes_goldfish_is_in_the_checkout_and_is_what_docs_goldfish_py_draws():
    """`tritonize client classify goldfish.jpg` pastes as written from the checkout's root; the image is the
    project's own drawing (docs/goldfish.py), re-drawn here: its JPEG may differ in bytes between Pillow versions,
    not in what it shows."""
    import importlib.util

    import numpy as np
    from PIL import Image

    spec = importlib.util.spec_from_file_location("goldfish", ROOT / "docs" / "goldfish.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = Image.open(ROOT / "goldfish.jpg")
    assert committed.format == "JPEG" and committed.size == (module.WIDTH, module.HEIGHT)
    drawn = np.asarray(module.draw(), np.float32)
    assert np.abs(np.asarray(committed, np.float32) - drawn).mean() < 3  # JPEG's loss, not another picture
    assert "goldfish.jpg" in README.read_text() and "docs/goldfish.py" in README.read_text()
