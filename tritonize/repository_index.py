"""Triton's repository index, read in one place: each entry's (state, reason), the reason on one line."""

from __future__ import annotations

import json
import urllib.request

from tritonize.access import ControlKey


def model_states(http_url: str, key: ControlKey | None = None) -> dict[str, tuple[str, str]]:
    """name -> (state, reason) from the repository index over HTTP (Triton's model repository extension)."""
    request = urllib.request.Request(f"{http_url}/v2/repository/index", data=b"{}", method="POST",
                                     headers=key.http_headers if key else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        index = json.loads(response.read())
    return {m["name"]: index_state(m) for m in sorted(index, key=lambda m: m["name"])}


def index_state(entry: dict) -> tuple[str, str]:
    """(state, reason) of a repository index entry (HTTP or gRPC JSON). With explicit model control a
    model that was never loaded comes without either."""
    if not entry.get("state"):
        return "UNAVAILABLE", "not loaded"
    return entry["state"], clean_reason(entry.get("reason", ""))


def clean_reason(reason: str) -> str:
    """One line: Triton appends the Python traceback of a failed initialize() (the message comes
    first) and ends load errors with `;`."""
    return " ".join(reason.split("\n\nAt:")[0].split()).rstrip(";")
