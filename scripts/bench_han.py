"""Times one HAN training step (forward, backward, clipping, Adam) in PyTorch on the batch that
`cargo bench -p longread-train --bench han_step` uses: 32 documents × 64 sentences × 32 words,
every word real, default sizes (embeddings 200, GRUs 2 × 50, attention 100, 1 hop, 2 labels,
12,290 words). The model is the one of make_han_fixtures.py; with no padding, nn.GRU runs on
the padded tensors directly (no packing: PyTorch's fastest path).

Usage: python3 scripts/bench_han.py [--threads 2]
"""
import argparse
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_han_fixtures import HAN  # noqa: E402

BATCH, DOC, SENT, WORDS = 32, 64, 32, 12_288


def step(model, ids, gold, optimizer, dropout):
    b, d, w = ids.shape
    mask = torch.ones(b * d, w)
    x = dropout(model.embedding(ids.reshape(b * d, w)))
    words, _ = model.word_gru(x)
    sentences, _ = model.word_attention(words, mask)
    states, _ = model.sentence_gru(sentences.reshape(b, d, -1))
    doc, _ = model.sentence_attention(states, torch.ones(b, d))
    logits = model.classifier(dropout(doc.reshape(b, -1)))
    loss = nn.functional.cross_entropy(logits, gold)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = dict(vocab_size=WORDS + 2, embedding_dim=200, word_hidden=50, sentence_hidden=50,
                  word_attention_size=100, sentence_attention_size=100, attention_hops=1, dropout=0.5,
                  doc_size=DOC, sent_size=SENT, labels=["false", "true"])
    model = HAN(config).train()
    ids = torch.tensor([2 + (i * 7_919) % WORDS for i in range(BATCH * DOC * SENT)]).reshape(BATCH, DOC, SENT)
    gold = torch.tensor([i % 2 for i in range(BATCH)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    dropout = nn.Dropout(0.5)
    times = []
    for run in range(6):
        started = time.perf_counter()
        step(model, ids, gold, optimizer, dropout)
        if run > 0:
            times.append(time.perf_counter() - started)
    times.sort()
    print(f"PyTorch {torch.__version__} HAN step, batch {BATCH} × {DOC} sentences × {SENT} words, "
          f"{args.threads} threads: {times[len(times) // 2]:.3f} s (median of {len(times)})")


if __name__ == "__main__":
    main()
