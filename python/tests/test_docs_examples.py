"""Every ```python block of README.md and docs/*.md runs (CONTRIBUTING.md, "Examples in the
documentation run as tests"); blocks tagged needs-gpu or needs-download are not run.

A file's blocks run in order in one scratch directory holding a copy of examples/, with the
file's ```sh blocks run there too (a Python example may use a model an earlier command made),
`longread` on PATH, and a local stand-in for the Hugging Face Hub (HF_ENDPOINT) that serves
sentence-transformers/all-MiniLM-L6-v2 from ../shared, as the Rust harness
(crates/longread-cli/tests/docs_examples.rs) does for the shell blocks.
"""

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import ROOT, binary, minilm

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FENCE = re.compile(r"^\s*```(.*)$")


def blocks(path):
    """[(line, language, tags, text)] of a Markdown file's fenced blocks."""
    out, current = [], None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            match = FENCE.match(line)
            if current is None and match:
                words = match.group(1).split()
                current = (number, words[0] if words else "", words[1:], [])
            elif current is not None and match and not match.group(1).strip():
                out.append((current[0], current[1], current[2], "".join(current[3])))
                current = None
            elif current is not None:
                current[3].append(line)
    return out


def runnable(block):
    _, language, tags, _ = block
    return language in ("python", "sh") and not tags


def documentation_files():
    docs = os.path.join(ROOT, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md"))
    return [os.path.join(ROOT, "README.md")] + [os.path.join(docs, n) for n in names]


def files_with_python():
    return [
        os.path.relpath(p, ROOT)
        for p in documentation_files()
        if any(b[1] == "python" and not b[2] for b in blocks(p))
    ]


class HubStandIn(http.server.BaseHTTPRequestHandler):
    """GET/HEAD /{repo}/resolve/{revision}/{file}, with Range, as the Hub answers them."""

    repos = {}

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.answer(head=True)

    def do_GET(self):
        self.answer(head=False)

    def answer(self, head):
        path = self.path.split("?")[0].lstrip("/")
        repo, _, rest = path.partition("/resolve/")
        _, _, file = rest.partition("/")
        local = self.repos.get(repo)
        target = os.path.join(local, file) if local and file and ".." not in file.split("/") else None
        if not target or not os.path.isfile(target):
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        with open(target, "rb") as f:
            body = f.read()
        start, end, status = 0, len(body) - 1, 200
        match = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if match and int(match.group(1)) < len(body):
            start = int(match.group(1))
            end = min(int(match.group(2)), end) if match.group(2) else end
            status = 206
        part = body[start : end + 1]
        self.send_response(status)
        self.send_header("x-repo-commit", COMMIT)
        self.send_header("etag", '"%016x%08x"' % (hash(body) & (2**64 - 1), len(body)))
        self.send_header("accept-ranges", "bytes")
        self.send_header("content-length", str(len(part)))
        if status == 206:
            self.send_header("content-range", f"bytes {start}-{end}/{len(body)}")
        self.end_headers()
        if not head:
            self.wfile.write(part)


@pytest.fixture(scope="module")
def hub():
    HubStandIn.repos = {"sentence-transformers/all-MiniLM-L6-v2": minilm()}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubStandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_every_file_with_python_examples_is_found():
    assert "docs/python.md" in files_with_python()


@pytest.mark.parametrize("name", files_with_python())
def test_documentation_examples_run(name, hub, tmp_path):
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(binary()) + os.pathsep + env.get("PATH", "")
    env["HF_ENDPOINT"] = hub
    env["HF_HOME"] = str(tmp_path / ".hf-home")
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("LONGREAD_DEVICE", None)
    for number, language, tags, text in blocks(os.path.join(ROOT, name)):
        if not runnable((number, language, tags, text)):
            continue
        if language == "python":
            script = tmp_path / f".block-{number}.py"
            script.write_text(text)
            command = [sys.executable, str(script)]
        else:
            command = ["bash", "-euo", "pipefail", "-c", text]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (
            f"{name}:{number}: the block failed ({done.returncode}):\n{text}\n"
            f"--- stdout (end) ---\n{done.stdout[-3000:]}\n--- stderr (end) ---\n{done.stderr[-3000:]}"
        )
