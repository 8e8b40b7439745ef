"""longread: classify long documents with hierarchical transformers, and see which parts drove
the decision. The same library the `longread` command line and server run:

    >>> import longread
    >>> clf = longread.Classifier("path/to/model")
    >>> clf.predict(["a long transcript ..."])[0]["label"]

Classifier, Embedder, evaluate, compare, ensemble, init, train and the RoBERTa kit (train_tokenizer,
new_encoder, pretrain) are native (the GIL is released while the
model runs); `longread.ray` classifies datasets on a Ray cluster. `longread.init` and
`longread.train` take `longread init`'s and `longread train`'s flags as keywords (their
`--help` lists them):

    >>> longread.train("train.jsonl", "bow", arch="bow", char_ngrams="2-5")["bow"]["chosen_c"]
    >>> longread.init("all-MiniLM-L6-v2", ["neutral", "partisan"], "init", attention_top_k=3)
    >>> longread.train("train.jsonl", "model", model="init", freeze_base=True, epochs=10)
"""

from ._longread import (
    Classifier,
    Embedder,
    InvalidDocumentError,
    LongreadError,
    ModelLoadError,
    __version__,
    calibrate,
    compare,
    ensemble,
    evaluate,
    init,
    new_encoder,
    pretrain,
    train,
    train_tokenizer,
    tune_threshold,
)

__all__ = [
    "Classifier",
    "Embedder",
    "InvalidDocumentError",
    "LongreadError",
    "ModelLoadError",
    "calibrate",
    "compare",
    "ensemble",
    "evaluate",
    "init",
    "new_encoder",
    "pretrain",
    "train",
    "train_tokenizer",
    "tune_threshold",
    "__version__",
]
