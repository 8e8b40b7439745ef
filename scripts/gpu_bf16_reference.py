"""PyTorch's own bf16 error on longread's GPU test models (scripts/gpu_check.sh runs it; the GPU
test `cuda_bf16_encoder_is_as_close_to_f32_as_pytorch_autocast` reads its output).

For each encoder checkpoint given (transformers loads longread's model directories: their
weights keep transformers' names), on the same deterministic ids: the last hidden states in f32
(TF32 off) and under bf16 autocast (SDPA, inference_mode), and their difference
max|bf16 - f32| / max|f32|. Writes {"models": {dir: {"ids": [[...]], "error": x}}}.

    python3 scripts/gpu_bf16_reference.py OUT.json DIR [DIR ...]
"""
import json
import sys

import torch
from transformers import AutoModel


def ids_for(vocab, batch=4, length=128):
    # The same deterministic ids the Rust test reads back from this file.
    g = torch.Generator().manual_seed(0)
    return torch.randint(5, vocab, (batch, length), generator=g)


def main():
    out, dirs = sys.argv[1], sys.argv[2:]
    torch.backends.cuda.matmul.allow_tf32 = False
    result = {"torch": torch.__version__, "models": {}}
    for d in dirs:
        model = AutoModel.from_pretrained(d, attn_implementation="sdpa").to("cuda").eval()
        cfg = model.config
        length = min(128, cfg.max_position_embeddings - 2)
        ids = ids_for(cfg.vocab_size, length=length).to("cuda")
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            f32 = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                bf16 = model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        error = ((bf16 - f32).abs().max() / f32.abs().max()).item()
        result["models"][d] = {"ids": ids.cpu().tolist(), "error": error}
        print(json.dumps({"model": d, "hidden": cfg.hidden_size, "pytorch_bf16_error": round(error, 6)}), flush=True)
    json.dump(result, open(out, "w"))


if __name__ == "__main__":
    main()
