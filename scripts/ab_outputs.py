#!/usr/bin/env python3
"""A/B of two longread builds' outputs (a refactoring must change no byte): `predict` on a
model and an input file, and the server's /classify on the first documents, byte for byte.

    python3 scripts/ab_outputs.py --old /path/old-longread --new target/release/longread \
        --model tests/fixtures/hier/trained-bert-attention \
        --input tests/fixtures/hier/documents.jsonl [--vector-cache DIR] [--serve-docs 20]

Prints one line per front (identical, or the first difference and the largest numeric gap)
and exits 1 when any front differs. Standard library only; servers listen on 127.0.0.1.
"""
import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request


def predict(binary, args):
    cmd = [binary, "--threads", "2", "predict", "--model", args.model, "--input", args.input]
    if args.vector_cache:
        cmd += ["--vector-cache", args.vector_cache]
    # Documents that cannot be classified get error lines and exit status 2: both compared.
    done = subprocess.run(cmd, capture_output=True)
    if done.returncode not in (0, 2):
        sys.exit(f"{binary} predict failed ({done.returncode}): {done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout + f"exit {done.returncode}\n".encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(binary, args, texts):
    port = free_port()
    cmd = [binary, "--threads", "2", "serve", "--model", args.model, "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(base + "/health", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            sys.exit(f"{binary} serve did not become healthy")
        bodies = []
        for text in texts:
            req = urllib.request.Request(
                base + "/classify",
                data=json.dumps({"inputs": text}).encode(),
                headers={"content-type": "application/json"},
            )
            try:
                bodies.append(urllib.request.urlopen(req, timeout=600).read())
            except urllib.error.HTTPError as e:
                bodies.append(f"{e.code} ".encode() + e.read())
        return b"\n".join(bodies)
    finally:
        server.terminate()
        server.wait()


def numbers(value):
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return []


def largest_gap(a, b):
    gap = 0.0
    for x, y in zip(a.splitlines(), b.splitlines()):
        try:
            p, q = numbers(json.loads(x.split(b" ", 1)[-1] if x[:1].isdigit() else x)), numbers(json.loads(y))
        except (ValueError, json.JSONDecodeError):
            continue
        if len(p) == len(q):
            gap = max([gap] + [abs(u - v) for u, v in zip(p, q)])
    return gap


def compare(front, old, new):
    if old == new:
        print(f"{front}: identical ({len(new.splitlines())} lines)")
        return True
    first = next(i for i, (x, y) in enumerate(zip(old.splitlines() + [b""], new.splitlines() + [b""])) if x != y)
    print(f"{front}: DIFFERENT from line {first + 1}; largest numeric gap {largest_gap(old, new):.3g}")
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True, help="JSON lines with a text field")
    parser.add_argument("--vector-cache", help="passed to predict")
    parser.add_argument("--serve-docs", type=int, default=20, help="documents sent to /classify (0: none)")
    args = parser.parse_args()
    same = compare("predict", predict(args.old, args), predict(args.new, args))
    if args.serve_docs:
        with open(args.input, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()][: args.serve_docs]
        same &= compare("serve /classify", serve(args.old, args, texts), serve(args.new, args, texts))
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
