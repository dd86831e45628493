"""Triton's repository index, read in one place: each entry's (state, reason), the reason on one line."""

from __future__ import annotations


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
