"""Type stubs of longread's native module."""

from os import PathLike
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

__version__: str

Text = Union[str, bytes]

class LongreadError(Exception):
    """Base class of every error longread raises."""

class ModelLoadError(LongreadError):
    """A model directory that is missing or cannot be loaded."""

class InvalidDocumentError(LongreadError):
    """A document that cannot be classified: not text, not UTF-8, empty, or with no words."""

class Classifier:
    """A model that classifies long documents (any directory `longread train`/`init` writes).

    Pickles as its settings (absolute model_dir, precision, max_batch_tokens, device,
    occlusion; not threads) and loads the model again when unpickled; works in processes
    forked after the parent predicted (each gets a thread pool of its own). occlusion=True:
    each chunk also gets "occlusion", the predicted label's probability minus its probability
    without that chunk (hierarchical models only)."""

    def __init__(
        self,
        model_dir: Union[str, PathLike[str]],
        threads: Optional[int] = None,
        precision: Optional[str] = None,
        max_batch_tokens: Optional[int] = None,
        device: str = "auto",
        occlusion: bool = False,
    ) -> None: ...
    @property
    def device(self) -> str:
        """Where the encoder runs: "cpu", or "cuda:N (GPU name)"."""
    @property
    def labels(self) -> list[str]:
        """Labels of the primary task, in id order."""
    @property
    def evidence_unit(self) -> str:
        """"chunk" (encoder models) or "sentence" (HAN)."""
    @property
    def multi_label(self) -> bool:
        """Whether a document may carry several labels (each prediction then has "labels",
        the list, beside "label", the most probable)."""
    def predict(self, texts: Iterable[Text]) -> list[dict[str, Any]]:
        """One dict per text as `longread predict` writes it; raises InvalidDocumentError for
        a text that cannot be classified."""
    def predict_batch(self, texts: Iterable[Text]) -> list[dict[str, Any]]:
        """As predict, with {"id", "error"} for a text that cannot be classified."""
    def report(self, texts: Iterable[Text]) -> str:
        """`longread report`: one self-contained HTML page with each text's prediction, its
        chunks' (or sentences') attention and the text shaded by it; a text that cannot be
        classified shows why. In a notebook: IPython.display.HTML(clf.report(texts))."""

class Embedder:
    """Sentence embeddings, as sentence-transformers computes them: the model's Pooling module's
    mode (pooling=None; "mean" or "cls" to choose) and its Normalize module (normalize=None).

    Pickles as its settings (absolute model_dir, device, precision, pooling; not threads)."""

    def __init__(
        self,
        model_dir: Union[str, PathLike[str]],
        threads: Optional[int] = None,
        device: str = "auto",
        precision: Optional[str] = None,
        pooling: Optional[str] = None,
    ) -> None: ...
    @property
    def dimension(self) -> int: ...
    @property
    def pooling(self) -> str:
        """"mean" or "cls"."""
    def embed(
        self, texts: Iterable[Text], normalize: Optional[bool] = None, batch_size: int = 32
    ) -> npt.NDArray[np.float32]:
        """A float32 array of shape [len(texts), dimension]; normalize=None scales to unit length
        when the model has sentence-transformers' Normalize module."""

def evaluate(
    model_dir: Union[str, PathLike[str]],
    data: Union[str, PathLike[str]],
    threads: Optional[int] = None,
    precision: Optional[str] = None,
    max_batch_tokens: Optional[int] = None,
    device: str = "auto",
) -> dict[str, Any]:
    """`longread eval` on one model: {"documents", "tasks": [{"name", "labels", "report"}]}; a
    report holds accuracy, F1s, the confusion matrix, "roc_auc" and "log_loss" of the
    probabilities (as scikit-learn's roc_auc_score and log_loss; "roc_auc" absent when a label
    has no documents), and "constant_prediction" (the label) when the model predicted one label
    for every document while the gold labels vary."""

def compare(
    models: Sequence[Union[str, PathLike[str]]],
    data: Union[str, PathLike[str]],
    threads: Optional[int] = None,
    precision: Optional[str] = None,
    max_batch_tokens: Optional[int] = None,
    bootstrap: int = 1000,
    seed: int = 0,
    device: str = "auto",
) -> dict[str, Any]:
    """`longread eval --model A --model B ... --json`: accuracy, macro-F1, ROC-AUC and
    per-label recall of each model on the same labelled documents, with 95% bootstrap intervals
    and paired bootstrap p-values against the first model."""

def tune_threshold(
    model_dir: Union[str, PathLike[str]],
    data: Optional[Union[str, PathLike[str]]] = None,
    metric: str = "macro-f1",
    write: bool = True,
    threads: Optional[int] = None,
    device: str = "auto",
    out_of_fold: Optional[Union[str, PathLike[str]]] = None,
    top_k: Optional[int] = None,
    min_labels: Optional[int] = None,
) -> dict[str, Any]:
    """`longread threshold`: the decision rule that maximizes `metric` ("macro-f1",
    "accuracy", "weighted-f1") on held-out labelled documents — a two-label model's threshold
    on its second label's probability, or a bias per label (added to ln p) for more labels;
    with write=True it is kept in the model (decision.json) and every Classifier loaded from it
    labels by it. {"positive" and "threshold", or "biases"; "chosen_by", "metric",
    "at_default", "at_threshold", "written", "warnings"}. out_of_fold instead of data: the
    out-of-fold predictions of a `train --cv` run (its out directory), for a final model
    trained on every document with its settings ("warnings" names where they differ). A
    multi-label model gets a threshold per label ({"decision": {"thresholds", ...}, ...});
    top_k and min_labels (multi-label only) cap and floor how many labels a document carries,
    kept with the thresholds."""

def calibrate(
    model_dir: Union[str, PathLike[str]],
    data: Optional[Union[str, PathLike[str]]] = None,
    write: bool = True,
    threads: Optional[int] = None,
    device: str = "auto",
    out_of_fold: Optional[Union[str, PathLike[str]]] = None,
) -> dict[str, Any]:
    """`longread calibrate`: the temperature of least log loss on held-out labelled documents
    (the primary task's probabilities become softmax(ln p / T)); with write=True it is kept in
    the model (calibration.json, the decision rule restated so that no label changes) and every
    Classifier loaded from it gives calibrated probabilities. {"temperature", "chosen_by",
    "previous", "at_bound", "documents", "log_loss" and "ece" ({"before", "after"}), "written",
    "warnings", and "decision" when a rule was restated}. out_of_fold instead of data: as for
    tune_threshold. A multi-label model gets a temperature per label (σ(logit(p) / T) each):
    {"temperatures", "chosen_by", "documents", "labels" (each label's fit), "log_loss", "ece",
    "written", "warnings", "decision" when its thresholds were restated}."""

def ensemble(
    models: Sequence[Union[str, PathLike[str]]],
    out: Union[str, PathLike[str]],
    weights: Optional[Sequence[float]] = None,
    calibrate: Optional[Union[str, PathLike[str]]] = None,
    fit_weights: bool = False,
    folds: int = 5,
    stack: Optional[Union[str, PathLike[str]]] = None,
    vector_cache: Optional[Union[str, PathLike[str]]] = None,
    seed: int = 42,
) -> dict[str, Any]:
    """`longread ensemble`: a new model directory `out` whose probabilities are the weighted
    mean of `models`' (any kinds, same labels); with `calibrate` (labelled held-out JSON lines)
    each member is tempered first, and with `fit_weights` the weights are fitted; with `stack`
    (the members' training data) they are fitted on out-of-fold scores instead, each member
    retrained `folds` times with its recorded settings. Multi-label members are calibrated or
    stacked label by label (each label's temperatures and weights in "per_label" of the
    calibration, "label_weights"/"label_temperatures" of each member); returns its
    ensemble.json."""

def init(
    encoder: Union[str, PathLike[str]],
    labels: Union[str, Sequence[str]],
    out: Union[str, PathLike[str]],
    **flags: Any,
) -> dict[str, Any]:
    """`longread init --encoder ENCODER --labels LABELS --out OUT ...`: a new classifier on a
    pretrained encoder; every flag of `longread init --help` as a keyword, underscores for
    dashes (`arch="sequence"`, `pooling="max-logits"`, `attention_top_k=3`, `stride=0`).
    `labels`: names in id order (or one comma-separated string). Returns the new model's
    config.json; raises LongreadError with the command line's message for settings it refuses,
    ModelLoadError for an encoder it cannot read."""

def train_tokenizer(
    corpus: Union[str, PathLike[str], Sequence[Union[str, PathLike[str]]]],
    out: Union[str, PathLike[str]],
    **flags: Any,
) -> dict[str, Any]:
    """`longread tokenizer train`: a byte-level BPE (`kind="bpe"`, default) or WordPiece
    (`kind="wordpiece"`) tokenizer learned from `corpus` (files or directories), written as
    OUT/tokenizer.json; `vocab_size`, `min_frequency`, `lowercase` as the flags. Returns
    {"path", "vocab_size", "texts", "bytes", "seconds"}."""

def new_encoder(
    preset: str,
    tokenizer: Union[str, PathLike[str]],
    out: Union[str, PathLike[str]],
    seed: int = 0,
) -> dict[str, Any]:
    """`longread encoder new`: a freshly initialised RoBERTa (roberta-base, roberta-large,
    small, tiny) for `tokenizer`, written to `out` in RobertaForMaskedLM's layout. Returns
    {"config", "parameters"}."""

def pretrain(
    corpus: Union[str, PathLike[str], Sequence[Union[str, PathLike[str]]]],
    tokenizer: Optional[Union[str, PathLike[str]]],
    out: Union[str, PathLike[str]],
    threads: Optional[int] = None,
    quiet: bool = False,
    device: str = "auto",
    on_evaluation: Optional[Callable[[dict[str, Any]], object]] = None,
    **flags: Any,
) -> dict[str, Any]:
    """`longread pretrain`: MLM pretraining with dynamic masking, of a new RoBERTa
    (`preset="small"`) or continued from a pretrained encoder (`model="DIR"`; `tokenizer=None`
    takes the model's own); every flag of `longread pretrain --help` as a keyword
    (`max_steps=2000`, `resume="auto"`).
    Progress and an evaluation line per `eval_every` steps go to stderr unless `quiet`;
    Ctrl-C stops at the next evaluation (checkpoint saved) and raises KeyboardInterrupt.
    `on_evaluation` is called with each evaluation's dict; an exception it raises stops the
    run the same way. Returns {"out", "evaluations", "stopped_for_resume"}."""

def train(
    train: Union[str, PathLike[str]],
    out: Union[str, PathLike[str]],
    threads: Optional[int] = None,
    quiet: bool = False,
    device: str = "auto",
    on_epoch: Optional[Callable[[dict[str, Any]], object]] = None,
    **flags: Any,
) -> dict[str, Any]:
    """`longread train --train TRAIN --out OUT ...`: every flag of `longread train --help` as a
    keyword, underscores for dashes (`arch="bow"`, `model="init"`, `freeze_base=True`,
    `lr=2e-5`, `c_values=[0.1, 1]`); True gives a switch, False or None leaves it out, a list
    repeats the flag. Notes, a progress line at most every 10 s (step, loss, time left) and
    a line per epoch go to stderr unless `quiet`. Ctrl-C
    stops the run after the step in progress, saves a checkpoint and raises
    KeyboardInterrupt; the same call with `resume="auto"` continues it. `on_epoch` is called
    after every epoch with that epoch's dict (as in "epochs"); an exception it raises stops
    the run the same way (checkpoint saved, the exception raised).
    Returns {"out", "epochs", "best_epoch", "kept_epoch", "stopped_for_resume", "bow", "cv",
    "threshold"};
    raises LongreadError with the command line's message for flags it refuses."""
