#!/usr/bin/env python3
"""PyTorch reference of longread's hierarchical classifier, written from the specification
(docs/model-format.md), not from the Rust code. Run by hand, never in CI.

It loads a longread model directory (config.json with a "longread" section, model.safetensors,
tokenizer.json) with transformers for the encoder and plain torch for chunking, pooling and
the head, and prints one JSON line per document like `longread predict`:

    python3 scripts/reference_hierarchical.py --model DIR --input docs.jsonl [--threads 2] [--output F]

`scripts/make_hierarchical_fixtures.py` and `scripts/bench_predict.py` import it.
Needs: torch, transformers, tokenizers, safetensors.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer

SECTION_DEFAULTS = {
    "format_version": 1, "chunk_size": 512, "stride": 256, "max_chunks": 20, "chunk_selection": "head",
    "chunk_pooling": "cls", "pooling_strategy": "attention", "attention_hidden_size": 256, "attention_heads": 1,
    "attention_top_k": 0, "attention_temperature": 1.0, "ordinal": False,
    "classifier_hidden_size": None, "hidden_dropout": 0.1, "attention_dropout": 0.1, "classifier_dropout": 0.3,
    "layer_norm_eps": 1e-5,
}


class Chunker:
    """Chunking exactly as specified: windows over the ids without special tokens."""

    def __init__(self, tokenizer_path, section):
        self.tok = Tokenizer.from_file(tokenizer_path)
        self.tok.no_truncation()
        self.tok.no_padding()
        with_special = self.tok.encode("hello world", add_special_tokens=True).ids
        without = self.tok.encode("hello world", add_special_tokens=False).ids
        at = next(i for i in range(len(with_special) - len(without) + 1) if with_special[i:i + len(without)] == without)
        self.prefix, self.suffix = with_special[:at], with_special[at + len(without):]
        self.s = section
        self.window = section["chunk_size"] - len(self.prefix) - len(self.suffix)
        self.step = self.window - section["stride"]
        assert self.step > 0

    def select(self, n):
        m = self.s["max_chunks"]
        if m == 0 or n <= m:
            return list(range(n))
        if self.s["chunk_selection"] == "head":
            return list(range(m))
        if m == 1:
            return [0]
        return [math.floor(i * (n - 1) / (m - 1) + 0.5) for i in range(m)]

    def chunk(self, text):
        if not text.strip():
            raise ValueError("the document is empty or whitespace-only (no tokens)")
        enc = self.tok.encode(text, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
        if not ids:
            raise ValueError("the document is empty or whitespace-only (no tokens)")
        starts = [0]
        while starts[-1] + self.window < len(ids):
            starts.append(starts[-1] + self.step)
        chunks = []
        for index in self.select(len(starts)):
            s = starts[index]
            e = min(s + self.window, len(ids))
            chunks.append({"index": index, "ids": self.prefix + ids[s:e] + self.suffix,
                           "start": offsets[s][0], "end": offsets[e - 1][1]})
        return chunks


class HierarchicalReference(torch.nn.Module):
    def __init__(self, encoder, head, section, labels, pad_id):
        super().__init__()
        self.encoder, self.head, self.s, self.labels, self.pad_id = encoder, head, section, labels, pad_id

    @classmethod
    def from_dir(cls, model_dir, attn_implementation="eager"):
        """attn_implementation: "eager" for the golden fixtures (the plain formula), "sdpa" for
        speed comparisons (what transformers uses by default)."""
        from transformers import AutoConfig, AutoModel

        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        section = {**SECTION_DEFAULTS, **cfg["longread"]}
        labels = [cfg["id2label"][str(i)] for i in range(len(cfg["id2label"]))]
        tensors = load_file(os.path.join(model_dir, "model.safetensors"))
        prefix = {"xlm-roberta": "roberta", "camembert": "roberta", "modernbert": "model",
                  "deberta-v2": "deberta"}.get(cfg["model_type"], cfg["model_type"]) + "."
        enc_cfg = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k not in ("longread", "architectures")})
        enc_cfg._attn_implementation = attn_implementation
        encoder = AutoModel.from_config(enc_cfg, add_pooling_layer=False)
        encoder_state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        missing, unexpected = encoder.load_state_dict(encoder_state, strict=False)
        missing = [m for m in missing if not m.endswith("position_ids") and not m.endswith("token_type_ids")]
        assert not missing and not unexpected, (missing, unexpected)
        head = {k: v for k, v in tensors.items() if not k.startswith(prefix)}
        return cls(encoder.eval(), head, section, labels, cfg.get("pad_token_id", 0))

    def chunk_vectors(self, chunks):
        width = max(len(c["ids"]) for c in chunks)
        ids = torch.tensor([c["ids"] + [self.pad_id] * (width - len(c["ids"])) for c in chunks])
        mask = torch.tensor([[1] * len(c["ids"]) + [0] * (width - len(c["ids"])) for c in chunks])
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.s["chunk_pooling"] == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1) / m.sum(1)

    def task_head(self, name=None):
        """The tensors of one task's head under their top-level names: the primary task's are
        stored at the top level, task `name`'s under `tasks.<name>.` (multi-task models)."""
        if name is None:
            return self.head
        prefix = f"tasks.{name}."
        return {k[len(prefix):]: v for k, v in self.head.items() if k.startswith(prefix)}

    def classify(self, h, task=None):
        """h: [n, H] chunk vectors → (logits [labels], attention [n]) of the primary task, or of
        task `task` (a name from the "tasks" list of the longread section)."""
        n, hidden = h.shape
        strategy, t = self.s["pooling_strategy"], self.task_head(task)
        if strategy == "max_logits":
            # Multiple-instance pooling: the head on every chunk, each label's max over chunks
            # (an ordinal head: the highest chunk score, then the cumulative link model).
            x = F.layer_norm(h, (hidden,), t["norm.weight"], t["norm.bias"], self.s["layer_norm_eps"])
            x = torch.tanh(x @ t["classifier.dense.weight"].T + t["classifier.dense.bias"])
            chunk_logits = x @ t["classifier.out_proj.weight"].T + t["classifier.out_proj.bias"]  # [n, L] or [n, 1]
            logits = chunk_logits.max(0).values
            attention = torch.softmax(chunk_logits[:, logits.argmax()], dim=0)
            return (self.ordinal_logits(t, logits[0]) if self.s.get("ordinal") else logits), attention
        self.label_attention = None
        if strategy in ("attention", "multihead", "label_attention"):
            u = torch.tanh(h @ t["pooler.projection.weight"].T + t["pooler.projection.bias"])  # [n, A]
            scores = u @ t["pooler.context.weight"].T / self.s.get("attention_temperature", 1.0)  # [n, K]
            k = self.s.get("attention_top_k", 0)
            if 0 < k < n:
                keep = torch.zeros_like(scores, dtype=torch.bool)
                keep.scatter_(0, scores.topk(k, dim=0).indices, True)
                scores = scores.masked_fill(~keep, -1e9)
            alpha = torch.softmax(scores, dim=0)  # [n, K]
            docs = alpha.T @ h  # [K, H]
            if strategy == "label_attention":
                # LAAT-style: one query per label, label l's logit from label l's document vector.
                x = F.layer_norm(docs, (hidden,), t["norm.weight"], t["norm.bias"], self.s["layer_norm_eps"])
                x = torch.tanh(x @ t["classifier.dense.weight"].T + t["classifier.dense.bias"])  # [L, C]
                outputs = x @ t["classifier.out_proj.weight"].T + t["classifier.out_proj.bias"]  # [L, L]
                self.label_attention = alpha.T  # [L, n]
                return outputs.diagonal(), alpha.mean(dim=1)
            if docs.shape[0] == 1:
                d = docs[0]
            else:
                d = t["pooler.merge.weight"] @ docs.reshape(-1) + t["pooler.merge.bias"]
            attention = alpha.mean(dim=1)
        elif strategy == "mean":
            d, attention = h.mean(0), torch.full((n,), 1.0 / n)
        elif strategy == "max":
            d, winners = h.max(0)
            attention = torch.bincount(winners, minlength=n).float() / hidden
        elif strategy == "first":
            d, attention = h[0], F.one_hot(torch.tensor(0), n).float()
        else:
            raise ValueError(strategy)
        x = F.layer_norm(d, (hidden,), t["norm.weight"], t["norm.bias"], self.s["layer_norm_eps"])
        x = torch.tanh(t["classifier.dense.weight"] @ x + t["classifier.dense.bias"])
        logits = t["classifier.out_proj.weight"] @ x + t["classifier.out_proj.bias"]
        if self.s.get("ordinal"):
            logits = self.ordinal_logits(t, logits[0])
        return logits, attention

    @staticmethod
    def ordinal_logits(t, score):
        """Cumulative link model (proportional odds): P(y <= k) = sigmoid(theta_k - score), theta_0 = t_0,
        theta_k = theta_{k-1} + softplus(t_k), t = initial values + classifier.thresholds; log class
        probabilities."""
        offsets = t["classifier.thresholds"]
        k = offsets.shape[0]
        init = torch.tensor([-(k - 1) / 2] + [math.log(math.e - 1)] * (k - 1))
        raw = init + offsets
        theta = torch.cat([raw[:1], F.softplus(raw[1:])]).cumsum(0)
        cdf = torch.sigmoid(theta - score)
        upper = torch.cat([cdf, torch.ones(1)])
        lower = torch.cat([torch.zeros(1), cdf])
        return (upper - lower).clamp_min(1e-12).log()

    @torch.no_grad()
    def predict(self, chunker, text):
        chunks = chunker.chunk(text)
        h = self.chunk_vectors(chunks)
        return self.prediction(chunks, h)

    def prediction(self, chunks, h):
        """The `predict` JSON of one document from its chunks and their vectors h [n, H]."""
        logits, attention = self.classify(h)
        multi_label = self.s.get("multi_label", False)
        probs = torch.sigmoid(logits) if multi_label else torch.softmax(logits, 0)
        out = {
            "label": self.labels[int(probs.argmax())],
            "scores": {l: float(p) for l, p in zip(self.labels, probs)},
            "logits": logits.tolist(),
            "chunks": [{"index": c["index"], "start": c["start"], "end": c["end"], "attention": float(a)}
                       for c, a in zip(chunks, attention)],
        }
        if multi_label:
            out["labels"] = [l for l, p in zip(self.labels, probs) if p >= 0.5]
        if self.label_attention is not None:
            for i, chunk in enumerate(out["chunks"]):
                chunk["labels"] = {l: float(self.label_attention[j, i]) for j, l in enumerate(self.labels)}
        extra = self.s.get("tasks") or []
        if len(extra) > 1:
            out["tasks"] = {}
            for task in extra[1:]:
                task_logits, task_attention = self.classify(h, task["name"])
                task_probs = torch.softmax(task_logits, 0)
                out["tasks"][task["name"]] = {
                    "label": task["labels"][int(task_probs.argmax())],
                    "scores": {l: float(p) for l, p in zip(task["labels"], task_probs)},
                    "logits": task_logits.tolist(),
                    "attention": task_attention.tolist(),
                }
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, help="JSON lines with a text field")
    ap.add_argument("--output", default="-")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = HierarchicalReference.from_dir(args.model)
    chunker = Chunker(os.path.join(args.model, "tokenizer.json"), model.s)
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    docs = [json.loads(l) for l in open(args.input) if l.strip()]
    start = time.perf_counter()
    for i, doc in enumerate(docs):
        try:
            line = {"id": doc.get("id", i), **model.predict(chunker, doc["text"])}
        except ValueError as e:
            line = {"id": doc.get("id", i), "error": str(e)}
        out.write(json.dumps(line) + "\n")
    print(f"reference: {len(docs)} documents in {time.perf_counter() - start:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
