#!/usr/bin/env python3
"""`longread serve` on a GPU against `longread predict` on the same card, documents and model, in
one run (scripts/gpu_check.sh; the target: serve at concurrency 32 >= 0.9x predict's documents/s,
GPU memory flat). Standard library only.

  python3 scripts/gpu_bench_serve.py LONGREAD MODEL_DIR WORKDIR [--docs 384] [--words 4000]
        [--concurrency 32] [--soak-seconds 60]

Documents: deterministic English-like texts of --words words (distinct per document).
predict:  `longread --device cuda predict` on them; its own timing line (model loading excluded).
serve:    the server (default flags: bf16, its GPU batch budget) answers each document once,
          POSTed to /predict by C client threads: documents/s over the phase's wall time; the
          labels are compared with predict's. Then a soak of --soak-seconds at the same
          concurrency with the GPU's used memory (nvidia-smi) sampled every 2 s: first and last
          samples and the largest. The server listens on 127.0.0.1 only.
Prints one JSON line.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import load  # noqa: E402

WORDS = ("the a of rain prices market storm city council report said week year new film "
         "music school game team season player coach police court judge law vote bill "
         "state river bridge road train station doctor patient study data model result").split()


def text(i, words):
    out, x = [], 1 + i * 7919
    for _ in range(words):
        x = (x * 1103515245 + 12345) % 2**31
        out.append(WORDS[x % len(WORDS)])
    return " ".join(out) + "."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_memory_mib():
    if subprocess.run(["which", "nvidia-smi"], capture_output=True).returncode != 0:
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None


def run_clients(url, texts, concurrency, deadline=None):
    """bench_serve's load, keeping each text's label: (wall seconds, labels by index, failures)."""
    labels = {}
    wall, _, failures = load(url, texts, concurrency, deadline=deadline, labels=labels)
    return wall, labels, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("longread")
    ap.add_argument("model")
    ap.add_argument("work")
    ap.add_argument("--docs", type=int, default=384)
    ap.add_argument("--words", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--soak-seconds", type=int, default=60)
    ap.add_argument("--device", default="cuda", help="cpu: try the script without a GPU (memory samples then fail)")
    args = ap.parse_args()
    texts = [text(i, args.words) for i in range(args.docs)]
    docs = os.path.join(args.work, "serve-docs.jsonl")
    with open(docs, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": t}) + "\n")

    done = subprocess.run([args.longread, "--device", args.device, "predict", "--model", args.model, "--input", docs,
                           "--output", os.path.join(args.work, "serve-predicted.jsonl")],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"predict failed: {done.stderr}")
    line = [l for l in done.stderr.splitlines() if "documents/s" in l][-1]
    predict_docs_per_s = float(re.search(r"([0-9.]+) documents/s", line).group(1))
    predicted = {}
    chunks = []
    with open(os.path.join(args.work, "serve-predicted.jsonl")) as f:
        for l in f:
            r = json.loads(l)
            predicted[int(r["id"])] = r["label"]
            chunks.append(len(r.get("chunks", [])))

    port = free_port()
    server = subprocess.Popen([args.longread, "--device", args.device, "serve", "--model", args.model, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except Exception:  # noqa: BLE001 - not up yet
                if server.poll() is not None:
                    sys.exit(f"serve exited: {server.stderr.read()}")
                time.sleep(0.2)
        run_clients(url, texts[:args.concurrency], args.concurrency)  # warm-up
        seconds, labels, failures = run_clients(url, texts, args.concurrency)
        agree = sum(labels.get(i) == predicted.get(i) for i in range(len(texts)))
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                m = gpu_memory_mib()
                if m is not None:
                    samples.append(m)
                stop.wait(2)

        sampler = threading.Thread(target=sample)
        sampler.start()
        soak_seconds, soak_labels, soak_failures = run_clients(url, texts, args.concurrency,
                                                               deadline=time.time() + args.soak_seconds)
        stop.set()
        sampler.join()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    serve_docs_per_s = len(texts) / seconds
    result = {
        "what": "serve",
        "docs": len(texts),
        "chunks_per_doc_mean": round(sum(chunks) / max(1, len(chunks)), 2),
        "concurrency": args.concurrency,
        "predict_docs_per_s": predict_docs_per_s,
        "serve_docs_per_s": round(serve_docs_per_s, 2),
        "serve_to_predict_ratio": round(serve_docs_per_s / predict_docs_per_s, 3),
        "labels_equal_to_predict": agree,
        "failures": len(failures) + len(soak_failures),
        "soak_seconds": round(soak_seconds, 1),
        "gpu_memory_mib_first": samples[0] if samples else None,
        "gpu_memory_mib_last": samples[-1] if samples else None,
        "gpu_memory_mib_max": max(samples) if samples else None,
        "gpu_memory_samples": samples,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
