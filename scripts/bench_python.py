#!/usr/bin/env python3
"""The Python package against the CLI on the same documents, and Ray with 1 and 2 actors, in
one run. Needs the package installed (`pip install "./python[ray]"`) and a release
build of the binary.

  python scripts/bench_python.py [--docs 100] [--threads 2] [--repeats 3] [--no-ray] [--json-out FILE]

A classifier is made with `longread init` on ../shared/models/all-MiniLM-L6-v2 (chunks of 512,
stride 256, max 20 chunks); the documents are the first --docs hyperpartisan test articles.
  CLI            `longread predict`'s own timing line (model loading excluded)
  Python         `Classifier.predict(texts)` timed around the call (model loading excluded)
  Ray, k actors  `longread.ray.classify` from a JSON-lines file to JSON lines, k actors of
                 threads/k threads each, reserving (threads-1)/k of Ray's CPUs (one is left to
                 Ray's read and write tasks); ray.init excluded; actor start-up and model
                 loading, reading, scheduling and writing included: that is Ray's overhead
Each runs --repeats times after a warm-up; min and median documents/s.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")


def timed(fn, repeats):
    fn()
    runs = []
    for _ in range(repeats):
        runs.append(fn())
    return min(runs), statistics.median(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import longread

    with open(os.path.join(SHARED, "data", "hyperpartisan", "test.jsonl")) as f:
        docs = [json.loads(line) for line in f][:args.docs]
    texts = [d["text"] for d in docs]
    results = {"cpu": cpu_description(), "docs": args.docs, "threads": args.threads}
    print(f"CPU: {results['cpu']}; {args.threads} threads; {args.docs} hyperpartisan test articles", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        subprocess.run([BINARY, "-q", "init", "--encoder", MINILM, "--labels", "no,yes", "--out", model], check=True)
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps({"id": d["id"], "text": d["text"]}) + "\n")

        def cli():
            res = subprocess.run([BINARY, "--threads", str(args.threads), "predict", "--model", model, "--input", path,
                                  "--output", os.devnull], capture_output=True, text=True, check=True)
            return float(re.search(r"in ([\d.]+) s", res.stderr).group(1))

        clf = longread.Classifier(model, threads=args.threads)

        def python():
            start = time.perf_counter()
            clf.predict(texts)
            return time.perf_counter() - start

        systems = {"CLI": cli, "Python Classifier.predict": python}
        if not args.no_ray:
            import ray
            import longread.ray

            ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False)
            ray.data.DataContext.get_current().enable_progress_bars = False
            for actors in (1, 2):
                def on_ray(actors=actors):
                    out = os.path.join(tmp, f"out-{actors}-{time.time_ns()}")
                    start = time.perf_counter()
                    longread.ray.classify(path, out, model, concurrency=actors, threads_per_actor=args.threads // actors,
                                          num_cpus_per_actor=(args.threads - 1) / actors, output_format="json")
                    return time.perf_counter() - start
                systems[f"Ray, {actors} actor{'s' if actors > 1 else ''}"] = on_ray
        results["systems"] = {}
        for name, fn in systems.items():
            best, median = timed(fn, args.repeats)
            results["systems"][name] = {"min_s": round(best, 3), "median_s": round(median, 3),
                                        "docs_per_s": round(args.docs / median, 3)}
        base = results["systems"]["CLI"]["docs_per_s"]
        print(f"{'system':<28} {'min s':>8} {'median s':>9} {'docs/s':>8} {'vs CLI':>7}")
        for name, r in results["systems"].items():
            r["ratio_to_cli"] = round(r["docs_per_s"] / base, 3)
            print(f"{name:<28} {r['min_s']:>8.2f} {r['median_s']:>9.2f} {r['docs_per_s']:>8.2f} {r['ratio_to_cli']:>6.2f}x")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
