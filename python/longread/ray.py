"""Batch classification of many documents on Ray Data: one model per actor, a pool of actors.

    import ray, longread.ray
    ray.init()
    longread.ray.classify("docs.jsonl", "out/", "path/to/model", concurrency=4, threads_per_actor=2)

or, inside your own pipeline:

    ds.map_batches(longread.ray.LongreadPredictor, fn_constructor_kwargs={"model_dir": "..."},
                   concurrency=4, num_cpus=2, batch_size=16)

On GPUs (a longread built with `cuda`): `classify(..., num_gpus_per_actor=1)` gives each actor
a GPU; Ray sets CUDA_VISIBLE_DEVICES per actor, so each sees its own as cuda:0 and
device="auto" picks it.

Each output row has the input's `id`, the `label` (None for a document that failed), the
whole prediction as `longread predict` writes it (`prediction`, a JSON string) and `error`
(None, or why the document failed); a multi-label model's rows also have `labels`, the list
of labels the document carries (possibly empty; None for a document that failed). Actors that die are restarted and their batches retried,
so every document appears once in the output.
"""

import json
import os
import sys
from typing import Any, Dict, Optional

import numpy as np

from ._longread import Classifier


class LongreadPredictor:
    """A callable class for `Dataset.map_batches`: loads the model once per actor."""

    def __init__(self, model_dir: str, threads: Optional[int] = 1, precision: Optional[str] = None,
                 text_column: str = "text", id_column: str = "id", _fail_once_file: Optional[str] = None,
                 device: str = "auto"):
        self.classifier = Classifier(model_dir, threads=threads, precision=precision, device=device)
        self.text_column, self.id_column = text_column, id_column
        # Tests only: the first batch served after this file is created kills the actor.
        self._fail_once_file = _fail_once_file

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self._fail_once_file and not os.path.exists(self._fail_once_file):
            with open(self._fail_once_file, "w") as f:
                f.write(str(os.getpid()))
            os._exit(1)
        texts = [t if isinstance(t, (str, bytes)) else str(t) for t in list(batch[self.text_column])]
        results = self.classifier.predict_batch(texts)
        ids = batch[self.id_column] if self.id_column in batch else np.arange(len(texts))
        rows = {
            "id": np.asarray(ids),
            "label": np.asarray([r.get("label") for r in results], dtype=object),
            "prediction": np.asarray([json.dumps({k: v for k, v in r.items() if k != "id"}) for r in results],
                                     dtype=object),
            "error": np.asarray([r.get("error") for r in results], dtype=object),
        }
        if self.classifier.multi_label:
            labels = np.empty(len(results), dtype=object)
            labels[:] = [r.get("labels") for r in results]
            rows["labels"] = labels
        return rows


def _format_name(path: str) -> str:
    """The name a file's format is read from, as `longread` reads it: lower case, without a
    trailing `.gz` (Ray inflates `*.gz` files as it reads them)."""
    name = path.lower()
    return name[:-3] if name.endswith(".gz") else name


def _read_delimited(ray, path: str):
    """A CSV/TSV file as `longread predict` reads it: a header row, quoted fields that may span
    lines (RFC 4180), and `id` and `text` kept as written (pyarrow would make an id `007` the
    number 7)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    delimiter = "\t" if _format_name(path).endswith(".tsv") else ","
    return ray.data.read_csv(
        path,
        parse_options=pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(column_types={"id": pa.string(), "text": pa.string()}),
    )


def classify(input: str, output: str, model_dir: str, concurrency: int = 2, threads_per_actor: int = 1,
             batch_size: int = 16, precision: Optional[str] = None, output_format: Optional[str] = None,
             num_cpus_per_actor: Optional[float] = None, num_gpus_per_actor: float = 0,
             **predictor_kwargs: Any):
    """Reads `input` (JSON lines; Parquet when it ends in .parquet or is a directory of them;
    CSV/TSV with a header row when it ends in .csv/.tsv; gzip-compressed when `.gz` follows)
    with columns `id` and `text`, classifies every document on `concurrency` actors of
    `threads_per_actor` CPUs each, and writes the predictions to the directory `output` as
    Parquet (default) or JSON lines (`output_format="json"`). Each actor reserves
    `num_cpus_per_actor` of Ray's CPUs (default `threads_per_actor`; leave some for Ray's read
    and write tasks, or they wait for the actors) and `num_gpus_per_actor` of its GPUs (default
    0: the CPU; with 1, each actor classifies on its own GPU). Returns the output Dataset."""
    import ray

    if not ray.is_initialized():
        ray.init()
    cpus_per_actor = threads_per_actor if num_cpus_per_actor is None else num_cpus_per_actor
    cluster_cpus = ray.cluster_resources().get("CPU", 0)
    reserved = concurrency * cpus_per_actor
    # Ray Data's read, repartition and write tasks need a CPU each: with every CPU reserved by
    # the actors they never start, and the run waits forever without a word.
    if cluster_cpus - reserved < 1:
        raise ValueError(
            f"concurrency={concurrency} actors × num_cpus_per_actor={cpus_per_actor:g} reserve {reserved:g} of the "
            f"cluster's {cluster_cpus:g} CPUs, leaving none for Ray's own read and write tasks: the run would wait "
            f"forever. Lower concurrency or num_cpus_per_actor (e.g. num_cpus_per_actor="
            f"{max(cluster_cpus - 1, 0) / max(concurrency, 1):g})")
    print(f"longread.ray: classifying {input} with {model_dir} on {concurrency} actors "
          f"({cpus_per_actor:g} CPUs and {num_gpus_per_actor:g} GPUs each) into {output}", file=sys.stderr, flush=True)
    if input.endswith(".parquet") or (os.path.isdir(input) and any(f.endswith(".parquet") for f in os.listdir(input))):
        ds = ray.data.read_parquet(input)
    elif _format_name(input).endswith((".csv", ".tsv")):
        ds = _read_delimited(ray, input)
    else:
        ds = ray.data.read_json(input)
    # One file reads as one block: split it so that every actor gets work.
    ds = ds.repartition(concurrency * 4, shuffle=False)
    predicted = ds.map_batches(
        LongreadPredictor,
        fn_constructor_kwargs={"model_dir": model_dir, "threads": threads_per_actor, "precision": precision,
                               **predictor_kwargs},
        concurrency=concurrency,
        num_cpus=threads_per_actor if num_cpus_per_actor is None else num_cpus_per_actor,
        num_gpus=num_gpus_per_actor,
        batch_size=batch_size,
        batch_format="numpy",
        max_restarts=-1,
        max_task_retries=-1,
    )
    if (output_format or "parquet") == "json":
        predicted.write_json(output)
    else:
        predicted.write_parquet(output)
    return predicted
