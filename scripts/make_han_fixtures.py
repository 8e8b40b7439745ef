"""Golden fixture for the HAN baseline (Yang et al. 2016), written independently of the Rust code
from its documented equations, with PyTorch's own nn.GRU on packed sequences (so padding is
handled by PyTorch, not by the carry-over rule the Rust GRU uses):

  tests/fixtures/han/  config.json, vocab.json, model.safetensors (random weights, seed 0),
                       expected.safetensors: ids [B, D, W] (int64), logits [B, L],
                       word_attention [B, D, W], sentence_attention [B, r, D]

Usage: python3 scripts/make_han_fixtures.py
"""
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "han")
CONFIG = dict(vocab_size=40, embedding_dim=12, word_hidden=5, sentence_hidden=6, word_attention_size=7,
              sentence_attention_size=8, attention_hops=2, dropout=0.5, doc_size=4, sent_size=6,
              labels=["general", "teen", "mature"])


def masked_softmax(scores, mask):
    """Softmax over the last dim restricted to mask (1 = real); rows without real positions → 0."""
    scores = scores.masked_fill(mask == 0, float("-inf"))
    out = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(out, nan=0.0)


def bigru(gru, x, lengths):
    """Runs a bidirectional nn.GRU on the real elements only; padded outputs are 0."""
    keep = lengths > 0
    out = torch.zeros(x.shape[0], x.shape[1], 2 * gru.hidden_size)
    if keep.any():
        packed = pack_padded_sequence(x[keep], lengths[keep].cpu(), batch_first=True, enforce_sorted=False)
        y, _ = gru(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        out[keep] = y
    return out


class Attention(nn.Module):
    def __init__(self, inp, size, hops):
        super().__init__()
        self.projection = nn.Linear(inp, size)
        self.context = nn.Linear(size, hops, bias=False)

    def forward(self, h, mask):  # h [N, T, in], mask [N, T] → vectors [N, r, in], weights [N, r, T]
        scores = self.context(torch.tanh(self.projection(h))).transpose(1, 2)
        weights = masked_softmax(scores, mask.unsqueeze(1))
        return weights @ h, weights


class HAN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embedding = nn.Embedding(c["vocab_size"], c["embedding_dim"], padding_idx=0)
        self.word_gru = nn.GRU(c["embedding_dim"], c["word_hidden"], batch_first=True, bidirectional=True)
        self.word_attention = Attention(2 * c["word_hidden"], c["word_attention_size"], 1)
        self.sentence_gru = nn.GRU(2 * c["word_hidden"], c["sentence_hidden"], batch_first=True, bidirectional=True)
        self.sentence_attention = Attention(2 * c["sentence_hidden"], c["sentence_attention_size"],
                                            c["attention_hops"])
        self.classifier = nn.Linear(c["attention_hops"] * 2 * c["sentence_hidden"], len(c["labels"]))

    def forward(self, ids):  # [B, D, W]
        b, d, w = ids.shape
        word_mask = (ids != 0).float()
        sentence_mask = (word_mask.sum(-1) > 0).float()
        flat = ids.reshape(b * d, w)
        words = bigru(self.word_gru, self.embedding(flat), word_mask.reshape(b * d, w).sum(-1).long())
        sentences, word_att = self.word_attention(words, word_mask.reshape(b * d, w))
        sentences = sentences.reshape(b, d, -1)
        states = bigru(self.sentence_gru, sentences, sentence_mask.sum(-1).long())
        doc, sent_att = self.sentence_attention(states, sentence_mask)
        return self.classifier(doc.reshape(b, -1)), word_att.reshape(b, d, w), sent_att


def main():
    torch.manual_seed(0)
    model = HAN(CONFIG).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # larger than the defaults: attention is not flat
            p.normal_(0, 0.5)
        model.embedding.weight[0].zero_()
    c = CONFIG
    # Real sentences must come first and real words first in each sentence.
    rows = [
        [[5, 9, 3, 12, 7, 2], [4, 4, 8, 0, 0, 0], [30, 31, 0, 0, 0, 0], [6, 1, 1, 19, 25, 0]],
        [[22, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
        [[11, 13, 17, 19, 23, 29], [39, 38, 37, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
    ]
    ids = torch.tensor(rows)
    with torch.no_grad():
        logits, word_att, sent_att = model(ids)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump({"architectures": ["LongreadHAN"], "model_type": "longread-han", **c}, f, indent=1)
    with open(os.path.join(OUT, "vocab.json"), "w") as f:
        json.dump(["<pad>", "<unk>"] + [f"w{i}" for i in range(2, c["vocab_size"])], f)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(OUT, "model.safetensors"))
    save_file({"ids": ids, "logits": logits, "word_attention": word_att, "sentence_attention": sent_att},
              os.path.join(OUT, "expected.safetensors"))
    print("logits", logits)
    print("sentence attention", sent_att)


if __name__ == "__main__":
    main()
