"""Embedding throughput on a GPU: longread `embed` against sentence-transformers, same model,
texts and batches (scripts/gpu_check.sh runs it). The model has all-MiniLM-L6-v2's shape (6
layers, hidden 384, 12 heads, FFN 1536) with random weights and the tiny WordPiece tokenizer of
tests/fixtures/tiny-bert (the real MiniLM's 90 MB of weights do not travel to the GPU machine;
speed does not depend on them). Texts: 20,000 deterministic sentences of 10 to 40 vocabulary
words; mean pooling, max 128 tokens, batches of 128, longest first on both sides (ST sorts by
length too). Both sides end to end from texts: tokenization included.

    python3 scripts/gpu_bench_embed.py LONGREAD_BINARY WORK_DIR   # one JSON line per measurement
"""
import json
import os
import random
import shutil
import subprocess
import sys
import time

import torch
from sentence_transformers import SentenceTransformer, models
from transformers import BertConfig, BertModel


def main():
    longread, work = sys.argv[1], sys.argv[2]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tok = os.path.join(repo, "tests/fixtures/tiny-bert/tokenizer.json")
    vocab = json.load(open(tok))["model"]["vocab"]
    words = [w for w in vocab if w.isalpha()]
    model_dir = os.path.join(work, "minilm-shape")
    os.makedirs(model_dir, exist_ok=True)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512)
    BertModel(cfg, add_pooling_layer=False).save_pretrained(model_dir, safe_serialization=True)
    shutil.copy(tok, os.path.join(model_dir, "tokenizer.json"))
    json.dump({"max_seq_length": 128, "do_lower_case": False}, open(os.path.join(model_dir, "sentence_bert_config.json"), "w"))
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(10, 40))) for _ in range(20000)]
    inputs = os.path.join(work, "texts.jsonl")
    with open(inputs, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")

    transformer = models.Transformer(model_dir, max_seq_length=128)
    st = SentenceTransformer(modules=[transformer, models.Pooling(384, "mean")], device="cuda")
    for dtype in ["bf16", "f32"]:
        model = st.to(torch.bfloat16) if dtype == "bf16" else st.to(torch.float32)
        model.encode(texts[:2000], batch_size=128)
        torch.cuda.synchronize()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            model.encode(texts, batch_size=128, convert_to_numpy=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        s = sorted(times)[1]
        print(json.dumps({"side": "sentence-transformers", "dtype": dtype, "texts": len(texts), "seconds": round(s, 3),
                          "texts_per_s": round(len(texts) / s, 1)}), flush=True)
        times = []
        for _ in range(3):
            run = subprocess.run([longread, "--device", "cuda", "embed", "--model", model_dir, "--input", inputs,
                                  "--precision", dtype, "--batch-size", "128", "--output", os.path.join(work, "emb.jsonl")],
                                 capture_output=True, text=True, check=True)
            line = [l for l in run.stderr.splitlines() if l.startswith("embedded")][-1]
            times.append(float(line.split(" in ")[1].split(" s")[0]))
        s = sorted(times)[1]
        print(json.dumps({"side": "longread", "dtype": dtype, "texts": len(texts), "seconds": s,
                          "texts_per_s": round(len(texts) / s, 1), "summary": line}), flush=True)


if __name__ == "__main__":
    main()
