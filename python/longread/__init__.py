"""longread: classify long documents with hierarchical transformers, and see which parts drove
the decision. The same library the `longread` command line and server run:

    >>> import longread
    >>> clf = longread.Classifier("path/to/model")
    >>> clf.predict(["a long transcript ..."])[0]["label"]

Classifier, Embedder, evaluate and ensemble are native (the GIL is released while the model runs);
`longread.ray` classifies datasets on a Ray cluster. Training is the command line's:
`longread train --help` (see README, "Python").
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
)

__all__ = [
    "Classifier",
    "Embedder",
    "InvalidDocumentError",
    "LongreadError",
    "ModelLoadError",
    "ensemble",
    "evaluate",
    "__version__",
]
