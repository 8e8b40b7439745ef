"""longread: classify long documents with hierarchical transformers, and see which parts drove
the decision. The same library the `longread` command line and server run:

    >>> import longread
    >>> clf = longread.Classifier("path/to/model")
    >>> clf.predict(["a long transcript ..."])[0]["label"]

Classifier, Embedder, evaluate, ensemble and train are native (the GIL is released while the
model runs); `longread.ray` classifies datasets on a Ray cluster. `longread.train` takes
`longread train`'s flags as keywords (`longread train --help` lists them):

    >>> longread.train("train.jsonl", "bow", arch="bow", char_ngrams="2-5")["bow"]["chosen_c"]
"""

from ._longread import (
    Classifier,
    Embedder,
    InvalidDocumentError,
    LongreadError,
    ModelLoadError,
    __version__,
    ensemble,
    evaluate,
    train,
)

__all__ = [
    "Classifier",
    "Embedder",
    "InvalidDocumentError",
    "LongreadError",
    "ModelLoadError",
    "ensemble",
    "evaluate",
    "train",
    "__version__",
]
