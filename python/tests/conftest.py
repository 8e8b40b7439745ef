"""Shared paths and helpers of the package's tests (run by .ci/run after the cargo tests)."""

import json
import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
MINILM = os.path.join(ROOT, "..", "shared", "models", "all-MiniLM-L6-v2")


def binary():
    """The release binary `cargo test --workspace --release` builds."""
    path = os.environ.get("LONGREAD_BIN", os.path.join(ROOT, "target", "release", "longread"))
    if not os.path.isfile(path):
        pytest.fail(f"{path} is missing: run `cargo build --release` first (or set LONGREAD_BIN)")
    return path


def longread(*args, **kwargs):
    """Runs the CLI; returns the CompletedProcess (text mode)."""
    return subprocess.run([binary(), *args], capture_output=True, text=True, **kwargs)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def minilm():
    """all-MiniLM-L6-v2 from ../shared; a failure under CI=true when missing, else a skip."""
    if os.path.isfile(os.path.join(MINILM, "model.safetensors")):
        return MINILM
    if os.environ.get("CI") == "true":
        pytest.fail(f"{MINILM} is missing: CI must provide ../shared")
    pytest.skip(f"{MINILM} not found (CI=true makes this a failure)")


def assert_close(a, b, tol=1e-6):
    """Equal structures, numbers within tol."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            assert_close(a[k], b[k], tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_close(x, y, tol)
    elif isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= tol, (a, b)
    else:
        assert a == b, (a, b)
