#!/usr/bin/env python3
"""`longread serve` under a bounded load on loopback, against `longread predict` on the same
documents, in one run. Standard library only (no PyTorch needed).

  python3 scripts/bench_serve.py [--docs 100] [--threads 2] [--concurrency 1,8,32]
          [--long-tokens 100000] [--soak-seconds 0] [--ensemble] [--json-out FILE]

A classifier is made with `longread init` on ../shared/models/all-MiniLM-L6-v2 (chunks of 512,
stride 256, --max-chunks 0: every chunk of every document is read); with --ensemble, the
served and predicted model is `longread ensemble` of that classifier and a bag of words
(`train --arch bow` on the hyperpartisan training articles, seconds). LONGREAD_BIN overrides
the binary (default target/release/longread). Phases:
  predict      `longread predict` on the first --docs hyperpartisan test articles: its own
               timing line (model loading excluded), documents/s.
  concurrency  the server (default flags, or --max-batch-tokens) answers the same articles, each POSTed once to
               /predict by C client threads (C = each --concurrency): documents/s over the
               phase's wall time, latency p50/p95/p99 per request.
  mix          the articles again at concurrency 8 while one more client keeps a document of
               about --long-tokens tokens in flight (hyperpartisan articles concatenated): the
               short documents' latency against the same phase without it.
  soak         (--soak-seconds > 0) concurrency 8 over the articles again and again, the long
               document every minute, RSS sampled every 5 s: first and last minute compared.
Memory: the server's peak RSS (VmHWM) after each phase, and its RSS after loading, from
/proc/PID/status. Every phase is bounded in requests and time; the server listens on
127.0.0.1 only.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.environ.get("LONGREAD_BIN", os.path.join(ROOT, "target", "release", "longread"))


def articles():
    with open(os.path.join(SHARED, "data", "hyperpartisan", "test.jsonl")) as f:
        return [json.loads(line) for line in f]


def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def post(url, body, timeout=600):
    """POSTs `body` as JSON; returns (status, seconds, the response body)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = response.read()
        status = response.status
    return status, time.perf_counter() - start, answer


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def load(url, texts, concurrency, deadline=None, labels=None):
    """Each text POSTed once (or again and again until `deadline`) by `concurrency` threads;
    returns (wall seconds, latencies, failures). With a dict `labels`, each text's predicted
    label is kept there under its index."""
    lock = threading.Lock()
    queue = list(enumerate(texts))
    latencies, failures = [], []

    def worker():
        while True:
            with lock:
                if not queue:
                    if deadline is None or time.time() >= deadline:
                        return
                    queue.extend(enumerate(texts))
                i, text = queue.pop(0)
            try:
                status, seconds, answer = post(url + "/predict", {"inputs": text})
                with lock:
                    latencies.append(seconds)
                    if labels is not None:
                        answer = json.loads(answer)
                        labels[i] = answer[0]["label"] if isinstance(answer, list) else answer.get("label")
            except (urllib.error.URLError, OSError) as e:
                with lock:
                    failures.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, latencies, failures


def summary(wall, latencies, failures, n_docs):
    return {
        "documents": n_docs,
        "wall_s": round(wall, 3),
        "docs_per_s": round(n_docs / wall, 3),
        "p50_s": round(percentile(latencies, 50), 4),
        "p95_s": round(percentile(latencies, 95), 4),
        "p99_s": round(percentile(latencies, 99), 4),
        "failures": len(failures),
    }


def keep_long_in_flight(url, text, stop, done):
    """POSTs the long document again and again until `stop` is set; records each duration."""
    while not stop.is_set():
        try:
            _, seconds, _ = post(url + "/predict", {"inputs": text})
            done.append(seconds)
        except (urllib.error.URLError, OSError):
            return


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--long-tokens", type=int, default=100000)
    ap.add_argument("--soak-seconds", type=int, default=0)
    ap.add_argument("--max-batch-tokens", type=int, help="the server's (default: its own default)")
    ap.add_argument("--ensemble", action="store_true",
                    help="serve an ensemble of the classifier and a bag of words (the recipe's shape)")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    all_articles = articles()
    docs = all_articles[:args.docs]
    texts = [d["text"] for d in docs]
    results = {"cpu": cpu_description(), "docs": args.docs, "threads": args.threads}
    print(f"CPU: {results['cpu']}; {args.threads} threads; {args.docs} hyperpartisan test articles", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        labels = "0,1" if args.ensemble else "no,yes"
        subprocess.run([BINARY, "-q", "init", "--encoder", MINILM, "--labels", labels, "--out", model,
                        "--max-chunks", "0"], check=True)
        if args.ensemble:
            train = os.path.join(SHARED, "data", "hyperpartisan", "train.jsonl")
            bow, members = os.path.join(tmp, "bow"), model
            subprocess.run([BINARY, "-q", "train", "--arch", "bow", "--labels", labels, "--train", train, "--out", bow],
                           check=True)
            model = os.path.join(tmp, "ensemble")
            subprocess.run([BINARY, "-q", "ensemble", "--model", members, "--model", bow, "--out", model], check=True)
        results["model"] = "ensemble (classifier + bag of words)" if args.ensemble else "classifier"
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps({"id": d["id"], "text": d["text"]}) + "\n")
        res = subprocess.run([BINARY, "predict", "--threads", str(args.threads), "--model", model, "--input", path,
                              "--output", os.devnull], capture_output=True, text=True, check=True)
        m = re.search(r"classified (\d+) documents? \((\d+) tokens?\) in ([\d.]+) s", res.stderr)
        tokens, seconds = int(m.group(2)), float(m.group(3))
        results["predict"] = {"tokens": tokens, "wall_s": seconds, "docs_per_s": round(args.docs / seconds, 3)}
        print(f"predict: {args.docs} documents ({tokens} tokens) in {seconds:.2f} s = "
              f"{args.docs / seconds:.2f} docs/s", flush=True)

        batch = ["--max-batch-tokens", str(args.max_batch_tokens)] if args.max_batch_tokens else []
        server = subprocess.Popen([BINARY, "--threads", str(args.threads), "serve", "--model", model, "--port", "0", *batch],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = server.stdout.readline()
            url = re.search(r"http://[\d.:]+", line).group(0)
            results["rss_loaded_mib"] = round(rss_kib(server.pid, "VmRSS") / 1024, 1)
            results["concurrency"] = {}
            for c in [int(x) for x in args.concurrency.split(",")]:
                wall, lat, fail = load(url, texts, c)
                r = summary(wall, lat, fail, len(texts))
                r["ratio_to_predict"] = round(r["docs_per_s"] / results["predict"]["docs_per_s"], 3)
                r["peak_rss_mib"] = round(rss_kib(server.pid, "VmHWM") / 1024, 1)
                results["concurrency"][c] = r
                print(f"concurrency {c:>2}: {r['docs_per_s']:.2f} docs/s ({r['ratio_to_predict']:.2f}x predict), "
                      f"p50 {r['p50_s']:.3f} s, p95 {r['p95_s']:.3f} s, p99 {r['p99_s']:.3f} s, "
                      f"{r['failures']} failures, peak RSS {r['peak_rss_mib']} MiB", flush=True)

            long_text, n = "", 0
            while n < args.long_tokens:
                a = all_articles[len(long_text) % len(all_articles)]["text"]
                long_text += a + "\n\n"
                n = int(len(long_text.split()) * 1.3)
            stop, long_done = threading.Event(), []
            long_thread = threading.Thread(target=keep_long_in_flight, args=(url, long_text, stop, long_done))
            long_thread.start()
            time.sleep(1.0)  # the long document is in the queue
            wall, lat, fail = load(url, texts, 8)
            stop.set()
            long_thread.join()
            mix = summary(wall, lat, fail, len(texts))
            alone = results["concurrency"].get(8) or summary(*load(url, texts, 8), len(texts))
            mix["p99_ratio_to_alone"] = round(mix["p99_s"] / alone["p99_s"], 3)
            mix["long_document_s"] = [round(s, 2) for s in long_done]
            mix["peak_rss_mib"] = round(rss_kib(server.pid, "VmHWM") / 1024, 1)
            results["mix"] = mix
            print(f"mix (8 clients + one ~{args.long_tokens}-token document in flight): "
                  f"{mix['docs_per_s']:.2f} docs/s, short p50 {mix['p50_s']:.3f} s, p95 {mix['p95_s']:.3f} s, "
                  f"p99 {mix['p99_s']:.3f} s = {mix['p99_ratio_to_alone']:.2f}x the p99 without it; long document "
                  f"{mix['long_document_s']} s; peak RSS {mix['peak_rss_mib']} MiB", flush=True)

            if args.soak_seconds > 0:
                samples, stop = [], threading.Event()

                def sample():
                    start = time.time()
                    while not stop.is_set():
                        samples.append((round(time.time() - start), rss_kib(server.pid, "VmRSS") / 1024))
                        stop.wait(5)

                sampler = threading.Thread(target=sample)
                sampler.start()
                deadline = time.time() + args.soak_seconds
                long_stop, long_done = threading.Event(), []

                def long_every_minute():
                    while time.time() < deadline and not long_stop.is_set():
                        post(url + "/predict", {"inputs": long_text})
                        long_done.append(1)
                        long_stop.wait(60)

                periodic = threading.Thread(target=long_every_minute)
                periodic.start()
                wall, lat, fail = load(url, texts, 8, deadline=deadline)
                long_stop.set()
                periodic.join()
                stop.set()
                sampler.join()
                first = [r for t, r in samples if t <= 60]
                last = [r for t, r in samples if t >= samples[-1][0] - 60]
                soak = summary(wall, lat, fail, len(lat))
                soak.update({"rss_first_minute_mib": round(statistics.mean(first), 1),
                             "rss_last_minute_mib": round(statistics.mean(last), 1),
                             "rss_samples_mib": [round(r, 1) for _, r in samples], "long_documents": len(long_done)})
                results["soak"] = soak
                print(f"soak {args.soak_seconds} s: {len(lat)} requests, {soak['failures']} failures, "
                      f"{len(long_done)} long documents; RSS first minute {soak['rss_first_minute_mib']} MiB, "
                      f"last minute {soak['rss_last_minute_mib']} MiB", flush=True)
            results["peak_rss_mib"] = round(rss_kib(server.pid, "VmHWM") / 1024, 1)
        finally:
            server.terminate()
            server.wait(timeout=120)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
