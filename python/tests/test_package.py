"""The package gives what the CLI gives, releases the GIL, and raises its documented errors."""

import json
import math
import multiprocessing
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import longread
import workers
from conftest import FIXTURES, assert_close, json_lines, longread as run_cli, minilm

DOCUMENTS = os.path.join(FIXTURES, "hier", "documents.jsonl")


def texts():
    with open(DOCUMENTS) as f:
        return [json.loads(line)["text"] for line in f]


@pytest.mark.parametrize("model", ["hier/trained-bert-attention", "hier/trained-multitask", "han"])
def test_predictions_equal_the_clis(model):
    model_dir = os.path.join(FIXTURES, model)
    cli = run_cli("predict", "--model", model_dir, "--input", DOCUMENTS)
    assert cli.returncode == 0, cli.stderr
    expected = json_lines(cli.stdout)
    got = longread.Classifier(model_dir).predict(texts())
    assert len(got) == len(expected) == len(texts())
    for g, e in zip(got, expected):
        g, e = dict(g), dict(e)
        g.pop("id"), e.pop("id")
        assert_close(g, e, 1e-6)


def test_labels_and_evidence_unit():
    clf = longread.Classifier(os.path.join(FIXTURES, "hier", "trained-bert-attention"))
    assert clf.labels == ["general", "teen", "mature"]
    assert clf.evidence_unit == "chunk"
    assert longread.Classifier(os.path.join(FIXTURES, "han")).evidence_unit == "sentence"
    assert "Classifier(" in repr(clf)


def test_bad_input_raises_the_documented_errors():
    clf = longread.Classifier(os.path.join(FIXTURES, "hier", "trained-bert-attention"))
    with pytest.raises(longread.ModelLoadError, match="no/such/model"):
        longread.Classifier("/no/such/model")
    with pytest.raises(longread.InvalidDocumentError, match="document 1: the document is empty"):
        clf.predict(["fine", "   "])
    with pytest.raises(longread.InvalidDocumentError, match="not one string"):
        clf.predict("a string, not a list")
    with pytest.raises(longread.InvalidDocumentError, match="document 1 is int, not str"):
        clf.predict(["fine", 3])
    # Regression: a dict was read as its keys ({"text": ...} classified the word "text"), and a
    # set's results came back in an order the caller never had.
    with pytest.raises(longread.InvalidDocumentError, match="not a dict .its keys would be read"):
        clf.predict({"text": "a document"})
    with pytest.raises(longread.InvalidDocumentError, match="not a set .its order is arbitrary"):
        clf.predict({"one", "two"})
    with pytest.raises(longread.InvalidDocumentError, match="not one bytes object"):
        clf.predict(b"bytes")
    assert len(clf.predict(t for t in ["a generator", "of texts"])) == 2
    with pytest.raises(longread.InvalidDocumentError, match="not valid UTF-8"):
        clf.predict([b"\xff\xfe"])
    with pytest.raises(longread.InvalidDocumentError, match="not valid UTF-8"):
        clf.predict(["\udcff"])
    with pytest.raises(longread.LongreadError, match="precision"):
        longread.Classifier(os.path.join(FIXTURES, "hier", "trained-bert-attention"), precision="f64")
    for threads in (0, 100000):  # 100,000 threads took minutes to start and never finished
        with pytest.raises(longread.LongreadError, match=f"threads {threads}: must be between 1 and "):
            longread.Classifier(os.path.join(FIXTURES, "hier", "trained-bert-attention"), threads=threads)
    assert issubclass(longread.InvalidDocumentError, longread.LongreadError)
    assert issubclass(longread.ModelLoadError, longread.LongreadError)


def test_device_is_chosen_and_a_missing_gpu_is_a_clear_error():
    model = os.path.join(FIXTURES, "hier", "trained-bert-attention")
    assert longread.Classifier(model, device="cpu").device == "cpu"
    with pytest.raises(longread.LongreadError, match="expected auto, cpu, cuda or cuda:N"):
        longread.Classifier(model, device="tpu")
    # No machine here has 64 GPUs, and CI's build has no `cuda` feature: either way one clear error.
    with pytest.raises(longread.ModelLoadError, match="cuda:63"):
        longread.Classifier(model, device="cuda:63")


def test_predict_batch_keeps_going_past_a_bad_document():
    clf = longread.Classifier(os.path.join(FIXTURES, "hier", "trained-bert-attention"))
    results = clf.predict_batch(["The committee met.", "", b"Rain is expected."])
    assert [r["id"] for r in results] == [0, 1, 2]
    assert "label" in results[0] and "label" in results[2]
    assert results[1]["error"].startswith("the document is empty")
    assert clf.predict_batch([]) == []


def test_the_gil_is_released_while_the_model_runs(tmp_path):
    # A model that reads thousands of 16-token chunks: a long document takes it a second or more.
    made = run_cli("init", "--encoder", os.path.join(FIXTURES, "tiny-bert"), "--labels", "a,b",
                   "--out", str(tmp_path / "slow"), "--max-chunks", "100000", "--chunk-size", "16", "--stride", "0")
    assert made.returncode == 0, made.stderr
    clf = longread.Classifier(str(tmp_path / "slow"), max_batch_tokens=16)
    document = " ".join(f"word{i % 50}" for i in range(40_000))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (clf.predict([document]), done.set()))
    ticks, started = [], time.perf_counter()
    worker.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.005)
    worker.join()
    elapsed = time.perf_counter() - started
    assert elapsed > 0.3, f"the document took only {elapsed:.2f} s: too short to tell"
    gaps = np.diff(ticks)
    assert gaps.max() < 0.25, f"Python was blocked for {gaps.max():.2f} s while the model ran"


def test_embeddings_equal_the_clis(tmp_path):
    model = minilm()
    sentences = ["What is deep learning?", "The committee met on Tuesday.", "Rain is expected."]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": s}) + "\n" for i, s in enumerate(sentences)))
    cli = run_cli("embed", "--model", model, "--input", str(path), "--normalize")
    assert cli.returncode == 0, cli.stderr
    expected = np.array([line["embedding"] for line in json_lines(cli.stdout)], dtype=np.float32)
    embedder = longread.Embedder(model)
    got = embedder.embed(sentences)
    assert got.dtype == np.float32 and got.shape == (3, embedder.dimension) == expected.shape
    assert np.abs(got - expected).max() <= 1e-6
    raw = embedder.embed(sentences, normalize=False)
    assert abs(np.linalg.norm(raw[0]) - 1.0) > 1e-3
    assert embedder.embed([]).shape == (0, embedder.dimension)
    assert repr(embedder) == f"Embedder({json.dumps(str(model))}, dimension={embedder.dimension})"
    assert embedder.pooling == "mean"  # all-MiniLM-L6-v2's 1_Pooling/config.json
    cls = longread.Embedder(model, pooling="cls")
    assert cls.pooling == "cls" and np.abs(cls.embed(sentences) - got).max() > 1e-3
    with pytest.raises(longread.LongreadError, match='pooling "max": expected "mean" or "cls"'):
        longread.Embedder(model, pooling="max")
    with pytest.raises(longread.InvalidDocumentError, match="document 1 is empty"):
        embedder.embed(["fine", " "])
    with pytest.raises(longread.LongreadError, match="batch_size must be between 1 and 65536, not 0"):
        embedder.embed(["fine"], batch_size=0)  # was taken for 1 without a word


@pytest.mark.parametrize("encoder", ["tiny-distilbert", "tiny-electra", "tiny-mpnet", "tiny-modernbert",
                                     "tiny-deberta-v3"])
def test_every_encoder_family_embeds_and_classifies_as_the_cli_does(tmp_path, encoder):
    directory = os.path.join(FIXTURES, encoder)
    sentences = ["The committee met on Tuesday.", "Rain is expected over the weekend."]
    embedder = longread.Embedder(directory)
    assert embedder.embed(sentences, normalize=False).tolist() == embedder.embed(sentences).tolist(), \
        "no Normalize module: kept as they are by default"
    got = embedder.embed(sentences, normalize=True)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": s}) + "\n" for i, s in enumerate(sentences)))
    cli = run_cli("embed", "--model", directory, "--input", str(path), "--normalize")
    assert cli.returncode == 0, cli.stderr
    expected = np.array([line["embedding"] for line in json_lines(cli.stdout)], dtype=np.float32)
    assert np.abs(got - expected).max() <= 1e-6
    model = tmp_path / "model"
    made = run_cli("init", "--encoder", directory, "--labels", "a,b", "--out", str(model), "--chunk-size", "16",
                   "--stride", "4")
    assert made.returncode == 0, made.stderr
    got = longread.Classifier(str(model)).predict(texts())
    cli = run_cli("predict", "--model", str(model), "--input", DOCUMENTS)
    assert cli.returncode == 0, cli.stderr
    for g, e in zip(got, json_lines(cli.stdout)):
        g, e = dict(g), dict(e)
        g.pop("id"), e.pop("id")
        assert_close(g, e, 1e-5)


def test_evaluate_equals_eval(tmp_path):
    model = os.path.join(FIXTURES, "hier", "trained-bert-attention")
    labelled = tmp_path / "labelled.jsonl"
    labels = ["general", "teen", "mature", "teen"]
    labelled.write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in zip(texts(), labels)))
    cli = run_cli("eval", "--model", model, "--data", str(labelled), "--json")
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    got = longread.evaluate(model, str(labelled))
    assert got["documents"] == 4
    report = got["tasks"][0]["report"]
    assert got["tasks"][0]["labels"] == ["general", "teen", "mature"]
    for key in ["accuracy", "macro_f1", "weighted_f1", "per_class", "confusion_matrix", "labels", "roc_auc", "log_loss"]:
        assert report[key] == expected[key], key
    # The probabilities' log loss, from the predictions' own scores.
    scores = [p["scores"][l] for p, l in zip(longread.Classifier(model).predict(texts()), labels)]
    assert abs(report["log_loss"] - sum(-math.log(s) for s in scores) / 4) < 1e-6
    with pytest.raises(longread.LongreadError, match="missing.jsonl"):
        longread.evaluate(model, str(tmp_path / "missing.jsonl"))
    # The same rows as CSV (Python's csv module quotes as RFC 4180 says) evaluate the same.
    import csv
    with open(tmp_path / "labelled.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(zip(texts(), labels))
    from_csv = longread.evaluate(model, str(tmp_path / "labelled.csv"))
    assert from_csv["tasks"][0]["report"] == report


def test_ensemble_averages_members_like_the_cli(tmp_path):
    hier, han = os.path.join(FIXTURES, "hier", "trained-bert-attention"), os.path.join(FIXTURES, "han")
    spec = longread.ensemble([hier, han], tmp_path / "ens", weights=[3, 1])
    assert [m["weight"] for m in spec["members"]] == [0.75, 0.25]
    got = longread.Classifier(tmp_path / "ens").predict(texts())
    cli = run_cli("predict", "--model", str(tmp_path / "ens"), "--input", DOCUMENTS)
    assert cli.returncode == 0, cli.stderr
    for g, e in zip(got, json_lines(cli.stdout)):
        g, e = dict(g), dict(e)
        g.pop("id"), e.pop("id")
        assert_close(g, e, 1e-6)
        mean = {k: 0.75 * g["members"][0]["scores"][k] + 0.25 * g["members"][1]["scores"][k] for k in g["scores"]}
        assert_close(g["scores"], mean, 1e-6)
    with pytest.raises(longread.ModelLoadError, match="already exists"):
        longread.ensemble([hier, han], tmp_path / "ens")
    with pytest.raises(longread.LongreadError, match="one per model"):
        longread.ensemble([hier, han], tmp_path / "other", weights=[1])


def test_train_runs_the_clis_training_with_the_same_flags(tmp_path, capfd):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    test = os.path.join(FIXTURES, "synthetic", "test.jsonl")
    summary = longread.train(train, tmp_path / "py", arch="bow", c_values=[0.1, 10], cv=4, char_ngrams="2-4")
    cli = run_cli("train", "--arch", "bow", "--train", train, "--out", str(tmp_path / "cli"),
                  "--c-values", "0.1,10", "--cv", "4", "--char-ngrams", "2-4")
    assert cli.returncode == 0, cli.stderr
    with open(tmp_path / "cli" / "cv.json") as f:
        assert summary["bow"] == json.load(f)
    assert summary["epochs"] == [] and summary["out"] == str(tmp_path / "py")
    texts = [r["text"] for r in json_lines(open(test).read())]
    got = longread.Classifier(tmp_path / "py").predict(texts)
    expected = longread.Classifier(tmp_path / "cli").predict(texts)
    assert [g["scores"] for g in got] == [e["scores"] for e in expected]

    made = run_cli("init", "--encoder", os.path.join(FIXTURES, "tiny-bert"), "--labels", "rain,prices",
                   "--out", str(tmp_path / "init"), "--chunk-size", "16", "--stride", "4", "--seed", "1")
    assert made.returncode == 0, made.stderr
    summary = longread.train(train, tmp_path / "hier", model=str(tmp_path / "init"), freeze_base=True,
                             epochs=2, head_lr=1e-3, no_cache=False, seed=3, keep="last", quiet=True)
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2] and summary["best_epoch"] in (1, 2)
    assert summary["kept_epoch"] == 2 and all(e["saved"] for e in summary["epochs"])
    assert longread.Classifier(tmp_path / "hier").labels == ["rain", "prices"]
    # A calibrated ensemble of the two: tempered members, weights fitted or equal.
    spec = longread.ensemble([tmp_path / "py", tmp_path / "hier"], tmp_path / "ens",
                             calibrate=os.path.join(FIXTURES, "synthetic", "test.jsonl"), fit_weights=True, folds=3)
    assert len(spec["members"]) == 2 and all(m["temperature"] > 0 for m in spec["members"])
    assert len(spec["calibration"]["out_of_fold"]) == 3
    assert sorted(longread.Classifier(tmp_path / "ens").labels) == ["prices", "rain"]
    with pytest.raises(longread.LongreadError, match="fit_weights"):
        longread.ensemble([tmp_path / "py", tmp_path / "hier"], tmp_path / "ens2", fit_weights=True)
    # Stacked by cross-validation on the training data: each member retrained per fold with its
    # recorded settings, every training document scored out of fold.
    spec = longread.ensemble([tmp_path / "py", tmp_path / "hier"], tmp_path / "stacked", stack=train,
                             fit_weights=True, folds=3, vector_cache=tmp_path / "vectors")
    assert spec["calibration"]["documents"] == len(json_lines(open(train).read()))
    assert sorted(longread.Classifier(tmp_path / "stacked").labels) == ["prices", "rain"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".longread-stack")]
    with pytest.raises(longread.LongreadError, match="not both"):
        longread.ensemble([tmp_path / "py", tmp_path / "hier"], tmp_path / "ens3", stack=train, calibrate=train)
    # Wide and deep: the bag of words travels inside the model and shows as a member.
    longread.train(train, tmp_path / "wide", model=str(tmp_path / "init"), freeze_base=True, epochs=2,
                   wide_bow=True, c_values=[1], quiet=True)
    assert (tmp_path / "wide" / "wide" / "bow.json").is_file()
    got = longread.Classifier(tmp_path / "wide").predict(texts[:2])
    assert [m["model"] for m in got[0]["members"]] == ["deep", "wide"]
    # Training takes the device too: a GPU this build or machine lacks is one clear error, and
    # nothing is left behind.
    with pytest.raises(longread.LongreadError, match="cuda:63"):
        longread.train(train, tmp_path / "gpu", model=str(tmp_path / "init"), device="cuda:63", quiet=True)
    assert not (tmp_path / "gpu").exists()
    with pytest.raises(longread.LongreadError, match="expected auto, cpu, cuda or cuda:N"):
        longread.train(train, tmp_path / "gpu", model=str(tmp_path / "init"), device="tpu", quiet=True)
    err = capfd.readouterr().err
    assert "bag of words on" in err and "epoch 1:" not in err, "the bow run spoke, the quiet one did not"


def test_train_refuses_what_the_cli_refuses(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    with pytest.raises(longread.LongreadError, match="unknown setting `lrr`"):
        longread.train(train, tmp_path / "a", arch="bow", lrr=1)
    with pytest.raises(longread.LongreadError, match="--epochs does not apply to --arch bow"):
        longread.train(train, tmp_path / "b", arch="bow", epochs=3)
    with pytest.raises(longread.LongreadError, match="no-such.jsonl"):
        longread.train(tmp_path / "no-such.jsonl", tmp_path / "c", arch="bow")
    # Keywords are named as written, not as the command line's flags.
    with pytest.raises(longread.LongreadError, match="`freeze_base` is a switch: give true or false"):
        longread.train(train, tmp_path / "d", model="init", freeze_base="yes")
    with pytest.raises(longread.LongreadError, match=r"^`epochs` = \"three\" is not valid: invalid digit found in string$"):
        longread.train(train, tmp_path / "e", model="init", epochs="three")
    # Regression: -1 was read as a flag ("unknown setting `1`"), True for a flag with a value
    # as an empty value ("`max_chunks` = \"\" is not valid (one of )").
    with pytest.raises(longread.LongreadError, match=r"^`epochs` = \"-1\" is not valid"):
        longread.train(train, tmp_path / "f", model="init", epochs=-1)
    with pytest.raises(longread.LongreadError, match=r"^`max_chunks` takes a value, not true"):
        longread.init(os.path.join(FIXTURES, "tiny-bert"), ["a", "b"], tmp_path / "g", max_chunks=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_keyword_arguments_keep_their_types(tmp_path):
    """Lists repeat a setting, numbers and paths pass as they are, None and False leave the
    default: the run records what the command line's flags would have given."""
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    longread.train(train, tmp_path / "py", arch="bow", c_values=[1, 10.5], char_ngrams="2-4", min_df=1,
                   cv=None, seed=7, quiet=True)
    cli = run_cli("train", "--train", train, "--out", str(tmp_path / "cli"), "--arch", "bow", "--c-values", "1,10.5",
                  "--char-ngrams", "2-4", "--min-df", "1", "--seed", "7")
    assert cli.returncode == 0, cli.stderr
    recorded = []
    for run in ("py", "cli"):
        with open(tmp_path / run / "training_args.json") as f:
            args = json.load(f)
        args.pop("out")
        args.pop("log_format", None)  # the command line's own setting
        recorded.append(args)
    assert recorded[0] == recorded[1]
    assert recorded[0]["bow"]["c_values"] == [1.0, 10.5] and recorded[0]["seed"] == 7


def test_init_makes_the_model_the_cli_makes(tmp_path):
    encoder = os.path.join(FIXTURES, "tiny-bert")
    config = longread.init(encoder, ["rain", "prices"], tmp_path / "py", chunk_size=16, stride=4,
                           pooling="attention", attention_top_k=2, seed=1)
    cli = run_cli("init", "--encoder", encoder, "--labels", "rain,prices", "--out", str(tmp_path / "cli"),
                  "--chunk-size", "16", "--stride", "4", "--attention-top-k", "2", "--seed", "1")
    assert cli.returncode == 0, cli.stderr
    with open(tmp_path / "cli" / "config.json") as f:
        assert config == json.load(f)
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert longread.Classifier(tmp_path / "py").labels == ["rain", "prices"]
    seq = longread.init(encoder, "a,b,c", tmp_path / "seq", arch="sequence")
    assert seq["id2label"] == {"0": "a", "1": "b", "2": "c"}


def test_init_refuses_what_the_cli_refuses(tmp_path):
    encoder = os.path.join(FIXTURES, "tiny-bert")
    with pytest.raises(longread.LongreadError, match="contains a name twice"):
        longread.init(encoder, ["a", "a"], tmp_path / "a")
    with pytest.raises(longread.LongreadError, match="--attention-top-k applies only to --pooling attention"):
        longread.init(encoder, ["a", "b"], tmp_path / "b", pooling="mean", attention_top_k=2)
    with pytest.raises(longread.LongreadError, match="unknown setting `poolin` \\(did you mean `pooling`\\?\\)"):
        longread.init(encoder, ["a", "b"], tmp_path / "c", poolin="mean")
    with pytest.raises(longread.ModelLoadError, match="no-such-encoder"):
        longread.init(tmp_path / "no-such-encoder", ["a", "b"], tmp_path / "d")
    with pytest.raises(longread.LongreadError, match="labels must be"):
        longread.init(encoder, 3, tmp_path / "e")
    with pytest.raises(longread.LongreadError, match="chunk_size 512 exceeds the encoder's 64 positions"):
        longread.init(encoder, ["a", "b"], tmp_path / "e", chunk_size=512)
    longread.init(encoder, ["a", "b"], tmp_path / "f", chunk_size=16, stride=4)
    with pytest.raises(longread.LongreadError, match="exists"):
        longread.init(encoder, ["a", "b"], tmp_path / "f", chunk_size=16, stride=4)
    assert not any((tmp_path / d).exists() for d in "abcde")


def test_train_ctrl_c_saves_a_checkpoint_that_resumes_to_the_same_model(tmp_path, capfd):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    init = tmp_path / "init"
    longread.init(os.path.join(FIXTURES, "tiny-bert"), ["rain", "prices"], init, chunk_size=16, stride=4,
                  attention_hidden_size=8, seed=1)
    flags = dict(model=str(init), epochs=80, batch_size=2, seed=1, quiet=True)
    longread.train(train, tmp_path / "full", **flags)

    metrics = tmp_path / "part" / "metrics.jsonl"
    seen = []

    def press_ctrl_c_soon_after_epoch_2(epoch):
        # Ctrl-C while the run is in Rust (Python's handler runs when the run polls for signals),
        # at a point the test controls: a timer armed after epoch 2 fires 1 ms later, whatever the
        # machine's load, while 78 epochs remain (a thread watching the metrics file could miss a
        # run this short on a busy machine).
        seen.append(epoch["epoch"])
        if epoch["epoch"] == 2:
            signal.signal(signal.SIGALRM, signal.default_int_handler)
            signal.setitimer(signal.ITIMER_REAL, 0.001)

    try:
        with pytest.raises(KeyboardInterrupt):
            longread.train(train, tmp_path / "part", on_epoch=press_ctrl_c_soon_after_epoch_2, **flags)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert seen[:2] == [1, 2], seen
    assert (tmp_path / "part" / "checkpoint-last").exists()
    assert len(metrics.read_text().splitlines()) < 80, "stopped early"
    summary = longread.train(train, tmp_path / "part", resume="auto", **{**flags, "quiet": False})
    assert summary["epochs"][-1]["epoch"] == 80
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("full", "part")]
    assert weights[0] == weights[1], "interrupted + resumed differs from the uninterrupted run"
    # The resumed run (not quiet) reported its progress, ending with its last step.
    steps = [line for line in capfd.readouterr().err.splitlines() if line.startswith("step ")]
    assert steps, "progress lines"
    done, total = steps[-1].split(":")[0].split()[1].split("/")
    assert done == total and "s left" in steps[-1], steps[-1]


def test_train_on_epoch_sees_every_epoch_and_its_exception_stops_the_run_resumably(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    init = tmp_path / "init"
    longread.init(os.path.join(FIXTURES, "tiny-bert"), ["rain", "prices"], init, chunk_size=16, stride=4,
                  attention_hidden_size=8, seed=1)
    flags = dict(model=str(init), epochs=4, batch_size=2, seed=1, quiet=True)
    seen = []
    summary = longread.train(train, tmp_path / "full", on_epoch=seen.append, **flags)
    assert seen == summary["epochs"] and [e["epoch"] for e in seen] == [1, 2, 3, 4]

    class Plateau(Exception):
        pass

    def stop_at_3(epoch):
        if epoch["epoch"] == 3:
            raise Plateau(f"dev loss {epoch['dev_loss']:.3f}")

    with pytest.raises(Plateau, match="dev loss"):
        longread.train(train, tmp_path / "part", on_epoch=stop_at_3, **flags)
    assert (tmp_path / "part" / "checkpoint-last").exists() and (tmp_path / "part" / "model.safetensors").exists()
    longread.train(train, tmp_path / "part", resume="auto", **flags)
    weights = [(tmp_path / d / "model.safetensors").read_bytes() for d in ("full", "part")]
    assert weights[0] == weights[1], "stopped by the callback + resumed differs from the uninterrupted run"

    with pytest.raises(TypeError, match="on_epoch must be callable"):
        longread.train(train, tmp_path / "never", on_epoch="print", **flags)
    assert not (tmp_path / "never").exists()


def test_train_without_a_dev_set_keeps_the_last_epoch(tmp_path, capfd):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    init = tmp_path / "init"
    longread.init(os.path.join(FIXTURES, "tiny-bert"), ["rain", "prices"], init, chunk_size=16, stride=4,
                  attention_hidden_size=8, seed=1)
    seen = []
    summary = longread.train(train, tmp_path / "all", model=str(init), freeze_base=True, epochs=3, dev_split=0,
                             on_epoch=seen.append)
    assert [e["epoch"] for e in seen] == [1, 2, 3]
    assert all("dev" not in e and "dev_loss" not in e and e["saved"] for e in seen), seen
    assert (summary["best_epoch"], summary["kept_epoch"]) == (None, 3)
    assert "no dev set" in capfd.readouterr().err
    assert longread.Classifier(str(tmp_path / "all")).predict(["Rain all day."])[0]["label"] in ("rain", "prices")
    with pytest.raises(longread.LongreadError, match="--keep best"):
        longread.train(train, tmp_path / "best", model=str(init), dev_split=0, keep="best", quiet=True)


def test_the_roberta_kit_makes_what_the_cli_makes(tmp_path, capfd):
    corpus = os.path.join(FIXTURES, "synthetic")
    made = longread.train_tokenizer(corpus, tmp_path / "tok-py", vocab_size=400)
    cli = run_cli("tokenizer", "train", "--corpus", corpus, "--out", str(tmp_path / "tok-cli"), "--vocab-size", "400")
    assert cli.returncode == 0, cli.stderr
    assert made["path"] == str(tmp_path / "tok-py" / "tokenizer.json") and made["vocab_size"] <= 400
    assert made["texts"] > 0 and made["bytes"] > 0
    assert (tmp_path / "tok-py" / "tokenizer.json").read_bytes() == (tmp_path / "tok-cli" / "tokenizer.json").read_bytes()

    encoder = longread.new_encoder("tiny", tmp_path / "tok-py", tmp_path / "enc-py", seed=3)
    cli = run_cli("encoder", "new", "--preset", "tiny", "--tokenizer", str(tmp_path / "tok-cli"),
                  "--out", str(tmp_path / "enc-cli"), "--seed", "3")
    assert cli.returncode == 0, cli.stderr
    assert encoder["config"]["vocab_size"] == made["vocab_size"] and encoder["parameters"] > 0
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "enc-py" / name).read_bytes() == (tmp_path / "enc-cli" / name).read_bytes(), name

    flags = dict(preset="tiny", max_steps=6, eval_every=3, batch_size=4, seq_len=48, seed=1)
    seen = []
    summary = longread.pretrain(corpus, tmp_path / "tok-py", tmp_path / "mlm", on_evaluation=seen.append, **flags)
    assert [e["step"] for e in summary["evaluations"]] == [3, 6] and not summary["stopped_for_resume"]
    assert seen == summary["evaluations"]
    assert all(e["perplexity"] > 1 for e in summary["evaluations"])
    assert "perplexity" in capfd.readouterr().err
    cli = run_cli("pretrain", "--corpus", corpus, "--tokenizer", str(tmp_path / "tok-py"), "--out",
                  str(tmp_path / "mlm-cli"), "--preset", "tiny", "--max-steps", "6", "--eval-every", "3",
                  "--batch-size", "4", "--seq-len", "48", "--seed", "1", "--log-format", "json")
    assert cli.returncode == 0, cli.stderr
    evals = [e for e in json_lines(cli.stdout) if e.get("event") == "eval"]
    assert_close([e["eval_loss"] for e in evals], [e["eval_loss"] for e in summary["evaluations"]], tol=1e-4)


def test_the_roberta_kit_refuses_what_the_cli_refuses(tmp_path):
    corpus = os.path.join(FIXTURES, "synthetic")
    with pytest.raises(longread.LongreadError, match="`kind` = \"unigram\" is not valid"):
        longread.train_tokenizer(corpus, tmp_path / "a", kind="unigram")
    with pytest.raises(longread.LongreadError, match="no-such"):
        longread.train_tokenizer(tmp_path / "no-such", tmp_path / "b")
    tok = os.path.join(FIXTURES, "tiny-roberta")
    with pytest.raises(longread.LongreadError, match="huge"):
        longread.new_encoder("huge", tok, tmp_path / "c")
    with pytest.raises(longread.LongreadError, match="give --preset NAME or --config FILE"):
        longread.pretrain(corpus, tok, tmp_path / "d", max_steps=2)
    with pytest.raises(longread.LongreadError, match="unknown setting `max_stepz` \\(did you mean `max_steps`\\?\\)"):
        longread.pretrain(corpus, tok, tmp_path / "e", preset="tiny", max_stepz=2)
    with pytest.raises(longread.LongreadError, match="give --tokenizer"):
        longread.pretrain(corpus, None, tmp_path / "f", max_steps=2)
    assert not any((tmp_path / d).exists() for d in "bcdef")


def test_pretraining_continues_a_pretrained_encoder_as_the_cli_does(tmp_path):
    corpus, bert = os.path.join(FIXTURES, "synthetic"), os.path.join(FIXTURES, "tiny-bert")
    flags = dict(model=bert, max_steps=4, eval_every=2, batch_size=4, seq_len=48, seed=2, lr=1e-3)
    summary = longread.pretrain(corpus, None, tmp_path / "py", quiet=True, **flags)
    assert [e["step"] for e in summary["evaluations"]] == [2, 4]
    cli = run_cli("pretrain", "--corpus", corpus, "--model", bert, "--out", str(tmp_path / "cli"),
                  "--max-steps", "4", "--eval-every", "2", "--batch-size", "4", "--seq-len", "48", "--seed", "2",
                  "--lr", "1e-3", "--log-format", "json")
    assert cli.returncode == 0, cli.stderr
    evals = [e for e in json_lines(cli.stdout) if e.get("event") == "eval"]
    assert_close([e["eval_loss"] for e in evals], [e["eval_loss"] for e in summary["evaluations"]], tol=1e-4)
    config = json.loads((tmp_path / "py" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]


def test_compare_gives_the_clis_comparison(tmp_path):
    gold = ["general", "teen", "mature", "general"]
    rows = json_lines(open(os.path.join(FIXTURES, "hier", "documents.jsonl")).read())
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps({**r, "label": g}) + "\n" for r, g in zip(rows, gold)))
    models = [os.path.join(FIXTURES, "hier", m) for m in ("bert-mean", "bert-attention")]
    got = longread.compare(models, data, bootstrap=500, seed=3)
    cli = run_cli("eval", "--model", models[0], "--model", models[1], "--data", str(data), "--json",
                  "--bootstrap", "500", "--seed", "3")
    assert cli.returncode == 0, cli.stderr
    assert_close(got, json.loads(cli.stdout), tol=1e-9)
    assert got["documents"] == 4 and got["models"][0]["accuracy_p_value"] is None
    assert "roc_auc_ci" in got["models"][0] and 0 <= got["models"][1]["roc_auc_p_value"] <= 1
    with pytest.raises(longread.LongreadError, match="bootstrap must be between"):
        longread.compare(models, data, bootstrap=5)
    with pytest.raises(longread.ModelLoadError):
        longread.compare([models[0], str(tmp_path / "none")], data)


def test_report_is_the_clis_page(tmp_path):
    model = os.path.join(FIXTURES, "hier", "trained-bert-attention")
    texts = ["The committee met on Tuesday to discuss the budget.", "Rain is expected over the weekend."]
    html = longread.Classifier(model).report(texts)
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    cli = run_cli("report", "--model", model, "--input", str(docs), "--out", str(tmp_path / "r.html"))
    assert cli.returncode == 0, cli.stderr
    assert html == (tmp_path / "r.html").read_text()
    with_error = longread.Classifier(model).report(["Rain is expected.", ""])
    assert with_error.startswith("<!DOCTYPE html>") and "the document is empty" in with_error


def test_occlusion_is_what_the_cli_gives_and_survives_pickling():
    model_dir = os.path.join(FIXTURES, "hier", "trained-bert-attention")
    clf = longread.Classifier(model_dir, occlusion=True)
    documents = texts()
    got = clf.predict(documents)
    cli = run_cli("predict", "--model", model_dir, "--input", os.path.join(FIXTURES, "hier", "documents.jsonl"),
                  "--occlusion")
    expected = json_lines(cli.stdout)
    several = [g for g in got if len(g["chunks"]) > 1]
    assert several
    for g, e in zip(got, expected):
        assert [c.get("occlusion") for c in g["chunks"]] == pytest.approx([c.get("occlusion") for c in e["chunks"]],
                                                                         abs=1e-6)
    clone = pickle.loads(pickle.dumps(clf))
    assert clone.predict(documents)[0]["chunks"] == got[0]["chunks"]
    assert "occlusion" not in longread.Classifier(model_dir).predict(documents)[-1]["chunks"][0]
    with pytest.raises(longread.ModelLoadError, match="occlusion reads a hierarchical model"):
        longread.Classifier(os.path.join(FIXTURES, "han"), occlusion=True)


def test_models_pickle_and_work_in_forked_and_spawned_workers():
    """multiprocessing on Linux forks by default: a worker forked after the parent had predicted
    waited forever (rayon's pool came over without its threads); models did not pickle."""
    model_dir = os.path.join(FIXTURES, "hier", "trained-bert-attention")
    clf = longread.Classifier(model_dir, precision="f32")
    documents = texts()
    expected = clf.predict(documents)  # the parent's thread pool runs before any fork
    clone = pickle.loads(pickle.dumps(clf))
    assert (clone.labels, repr(clone).count("trained-bert-attention")) == (clf.labels, 1)
    assert_close(clone.predict(documents), expected)

    def same(got):
        for g, e in zip(got, expected):
            g, e = dict(g), dict(e)
            g.pop("id"), e.pop("id")
            assert_close(g, e, 1e-6)

    for method in ["fork", "spawn"]:
        context = multiprocessing.get_context(method)
        with context.Pool(2) as pool:  # the model pickled to each task
            same(pool.map_async(workers.predict_with, [(clf, t) for t in documents]).get(timeout=120))
        with context.Pool(2, initializer=workers.hold, initargs=(clf,)) as pool:  # fork: inherited as is
            same(pool.map_async(workers.predict_with_held, documents).get(timeout=120))

    # A fork of a fork: the child's own pools did not come over either.
    def fork_and_predict(depth):
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                ok = clf.predict(documents[:1])[0]["scores"] == expected[0]["scores"]
                ok = ok and (depth == 1 or fork_and_predict(depth - 1))
            finally:
                os._exit(0 if ok else 1)
        deadline = time.time() + 120
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status == 0
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        return False

    assert fork_and_predict(2), "a forked (or twice forked) process predicts the parent's scores"

    embedder = longread.Embedder(minilm())
    vector = embedder.embed(["The committee met on Tuesday."])[0]
    assert np.array_equal(pickle.loads(pickle.dumps(embedder)).embed(["The committee met on Tuesday."])[0], vector)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        forked = pool.map_async(workers.embed_with, [(embedder, "The committee met on Tuesday.")]).get(timeout=120)
    assert np.allclose(forked[0], vector, atol=1e-6)


def test_init_warns_as_the_cli_notes_about_a_mean_pooled_encoder(tmp_path):
    import warnings
    encoder = minilm()
    with pytest.warns(UserWarning, match="is read by mean pooling .* --chunk-pooling mean"):
        longread.init(encoder, ["a", "b"], tmp_path / "default")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        longread.init(encoder, ["a", "b"], tmp_path / "mean", chunk_pooling="mean")


def test_tune_threshold_keeps_it_in_the_model_and_classifiers_label_by_it(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    test = os.path.join(FIXTURES, "synthetic", "test.jsonl")
    longread.train(train, tmp_path / "bow", arch="bow", quiet=True)
    model = str(tmp_path / "bow")
    rows = json_lines(open(test).read())
    before = longread.Classifier(model).predict([r["text"] for r in rows])
    rain = sorted(p["scores"]["rain"] for p in before)
    # Gold: `rain` for the highest P(rain) from a gap above another P(rain) > 0.5, which only a
    # threshold above 0.5 separates.
    k = max(k for k in range(2, len(rain)) if rain[k - 1] < rain[k] and rain[k - 1] > 0.5)
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({**r, "label": "rain" if p["scores"]["rain"] >= rain[k] else "prices"}) + "\n"
                           for r, p in zip(rows, before)))
    dry = longread.tune_threshold(model, dev, write=False)
    assert not dry["written"] and not os.path.exists(os.path.join(model, "decision.json"))
    assert rain[k - 1] < dry["threshold"] < rain[k] and dry["at_threshold"]["accuracy"] == 1.0
    got = longread.tune_threshold(model, dev)
    assert got["written"] and got["positive"] == "rain"
    after = longread.Classifier(model).predict([r["text"] for r in rows])
    for p in after:
        assert p["label"] == ("rain" if p["scores"]["rain"] >= got["threshold"] else "prices"), p
    assert longread.evaluate(model, str(dev))["tasks"][0]["report"]["accuracy"] == 1.0
    with pytest.raises(longread.LongreadError, match="metric \"f2\""):
        longread.tune_threshold(model, dev, metric="f2")
    # A three-label model cannot read these labels (rain, prices): named, nothing written.
    with pytest.raises(longread.LongreadError, match="unknown label \"(rain|prices)\" \\(the model.s labels: general, teen, mature\\)"):
        longread.tune_threshold(os.path.join(FIXTURES, "hier", "trained-bert-attention"), dev, write=False)


def test_calibrate_keeps_a_temperature_classifiers_apply_without_changing_labels(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    dev = os.path.join(FIXTURES, "synthetic", "test.jsonl")
    longread.train(train, tmp_path / "bow", arch="bow", quiet=True)
    model = str(tmp_path / "bow")
    texts = [r["text"] for r in json_lines(open(dev).read())]
    before = longread.Classifier(model).predict(texts)
    dry = longread.calibrate(model, dev, write=False)
    assert not dry["written"] and not os.path.exists(os.path.join(model, "calibration.json"))
    assert dry["log_loss"]["after"] <= dry["log_loss"]["before"] and dry["documents"] == len(texts)
    got = longread.calibrate(model, dev)
    assert got["written"] and got["temperature"] == pytest.approx(dry["temperature"])
    t = got["temperature"]
    after = longread.Classifier(model).predict(texts)
    for b, a in zip(before, after):
        assert a["label"] == b["label"]
        p = np.array([b["scores"][label] for label in b["scores"]], dtype=np.float64)
        want = np.exp(np.log(p) / t) / np.exp(np.log(p) / t).sum()
        assert np.allclose([a["scores"][label] for label in b["scores"]], want, atol=1e-6), (a, want)
    report = longread.evaluate(model, dev)["tasks"][0]["report"]
    assert report["log_loss"] == pytest.approx(got["log_loss"]["after"], abs=1e-5)
    assert report["ece"] == pytest.approx(got["ece"]["after"], abs=1e-5)


def test_train_calibrate_returns_and_keeps_the_temperature(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    run = longread.train(train, tmp_path / "bow", arch="bow", calibrate=True, tune_threshold="macro-f1", quiet=True)
    kept = json.load(open(tmp_path / "bow" / "calibration.json"))
    assert run["calibration"]["temperature"] == pytest.approx(kept["temperature"])
    assert run["calibration"]["log_loss"]["after"] <= run["calibration"]["log_loss"]["before"]
    assert "out-of-fold" in run["threshold"]["chosen_by"]


def test_a_final_model_calibrates_and_tunes_on_its_cv_runs_out_of_fold_predictions(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    small = dict(arch="han", labels="rain,prices", embedding_dim=16, gru_hidden=8, attention_size=16, epochs=2,
                 quiet=True)
    run = longread.train(train, tmp_path / "cv", cv=2, **small)
    pooled = run["cv"]["out_of_fold"]
    assert pooled["documents"] == len(open(train).read().splitlines())
    rows = json_lines(open(tmp_path / "cv" / "out-of-fold.jsonl").read())
    assert pooled["accuracy"] == pytest.approx(np.mean([r["label"] == r["predicted"] for r in rows]))
    longread.train(train, tmp_path / "final", dev_split=0, **small)
    final = str(tmp_path / "final")
    fitted = longread.calibrate(final, out_of_fold=tmp_path / "cv")
    assert fitted["written"] and fitted["warnings"] == []
    assert fitted["log_loss"]["before"] == pytest.approx(pooled["log_loss"], abs=1e-9)
    rule = longread.tune_threshold(final, out_of_fold=tmp_path / "cv", write=False)
    assert rule["at_default"]["accuracy"] == pytest.approx(pooled["accuracy"])
    with pytest.raises(longread.LongreadError, match="give either data"):
        longread.calibrate(final)


def test_train_tune_threshold_keeps_the_threshold_found_on_its_dev_set(tmp_path):
    train = os.path.join(FIXTURES, "synthetic", "train.jsonl")
    dev = os.path.join(FIXTURES, "synthetic", "test.jsonl")
    out = tmp_path / "han"
    run = longread.train(train, out, arch="han", embedding_dim=16, gru_hidden=8, attention_size=16, epochs=2,
                         dev=dev, tune_threshold="accuracy", quiet=True)
    kept = run["threshold"]
    assert kept["positive"] == "rain" and kept["metric"] == "accuracy"
    # What the run kept is what tune_threshold finds on the same documents with that model.
    again = longread.tune_threshold(str(out), dev, metric="accuracy", write=False)
    assert again["threshold"] == kept["threshold"]
    assert again["at_threshold"]["accuracy"] == kept["at_threshold"]["accuracy"]
    assert json.load(open(out / "decision.json"))["threshold"] == kept["threshold"]
    with pytest.raises(longread.LongreadError, match="--dev-split 0 holds out no dev set"):
        longread.train(train, tmp_path / "none", arch="han", dev_split=0, tune_threshold="accuracy", quiet=True)


def test_a_multi_label_model_trains_predicts_and_evaluates_as_the_cli_does(tmp_path):
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    train, test = os.path.join(descriptors, "train.csv"), os.path.join(descriptors, "test.csv")
    out = str(tmp_path / "descriptors")
    result = longread.train(train, out, arch="bow", multi_label=True, c_values=[1, 10], quiet=True)
    assert result["bow"]["chosen_c"] in (1, 10)
    model = longread.Classifier(out)
    assert model.multi_label and model.labels == ["drugs", "language", "violence"]
    cli = json_lines(run_cli("predict", "--model", out, "--input", test).stdout)
    import csv
    with open(test, newline="") as f:
        rows = list(csv.DictReader(f))
    got = model.predict([row["text"] for row in rows])
    for mine, theirs in zip(got, cli):
        assert mine["labels"] == theirs["labels"]
        assert mine["labels"] == [l for l in model.labels if mine["scores"][l] >= 0.5]
        assert_close(mine["scores"], theirs["scores"], 1e-6)
        # The terms that raised each carried label, as the CLI names them.
        assert [(t["label"], t["term"]) for t in mine["terms"]] == [(t["label"], t["term"]) for t in theirs["terms"]]
        assert {t["label"] for t in mine["terms"]} <= set(mine["labels"])
    expected = json.loads(run_cli("eval", "--model", out, "--data", test, "--json").stdout)
    report = longread.evaluate(out, test)
    for key in ["documents", "micro", "macro_avg", "samples", "subset_accuracy", "hamming_loss", "per_label"]:
        assert report[key] == expected[key], key
    assert report["micro_f1_ci"]["low"] <= report["micro"]["f1"] <= report["micro_f1_ci"]["high"]
    compared = longread.compare([out, out], test)
    cli_compared = json.loads(run_cli("eval", "--model", out, "--model", out, "--data", test, "--json").stdout)
    assert [m["report"]["micro"] for m in compared["models"]] == [m["report"]["micro"] for m in cli_compared["models"]]
    assert compared["models"][1]["micro_f1_p_value"] == cli_compared["models"][1]["micro_f1_p_value"]
    with pytest.raises(longread.LongreadError, match="unknown label"):
        longread.train(train, str(tmp_path / "refused"), arch="bow", multi_label=True, labels="violence,drugs")


def test_a_multi_label_ensemble_is_stacked_label_by_label_as_the_cli_stacks_it(tmp_path):
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    train, test = os.path.join(descriptors, "train.csv"), os.path.join(descriptors, "test.csv")
    words, chars = str(tmp_path / "words"), str(tmp_path / "chars")
    longread.train(train, words, arch="bow", multi_label=True, c_values=[1, 10], quiet=True)
    longread.train(train, chars, arch="bow", multi_label=True, c_values=[1, 10], char_ngrams="2-4", quiet=True)
    spec = longread.ensemble([words, chars], tmp_path / "py", stack=train, folds=3, fit_weights=True)
    cli = run_cli("ensemble", "--model", words, "--model", chars, "--stack", train, "--folds", "3",
                  "--fit-weights", "--json", "--out", str(tmp_path / "cli"))
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert [c["label"] for c in spec["calibration"]["per_label"]] == ["drugs", "language", "violence"]
    assert spec["calibration"] == expected["calibration"]
    assert [m["label_weights"] for m in spec["members"]] == [m["label_weights"] for m in expected["members"]]
    got = longread.Classifier(tmp_path / "py").predict([r["text"] for r in csv_rows(test)])
    theirs = json_lines(run_cli("predict", "--model", str(tmp_path / "cli"), "--input", test).stdout)
    for mine, other in zip(got, theirs):
        assert mine["labels"] == other["labels"]
        assert_close(mine["scores"], other["scores"], 1e-6)


def csv_rows(path):
    import csv
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_multi_label_hierarchical_model_is_made_trained_and_read_as_the_cli_does(tmp_path):
    encoder = minilm()
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    train, test = os.path.join(descriptors, "train.csv"), os.path.join(descriptors, "test.csv")
    made = str(tmp_path / "init")
    config = longread.init(encoder, ["drugs", "language", "violence"], made, multi_label=True, chunk_size=128,
                           chunk_pooling="mean")
    assert config["problem_type"] == "multi_label_classification" and config["longread"]["multi_label"]
    out = str(tmp_path / "trained")
    run = longread.train(train, out, model=made, freeze_base=True, epochs=2, pos_weight="auto", metric="micro-f1",
                         quiet=True)
    assert run["epochs"][-1]["dev"]["micro_f1"] is not None
    model = longread.Classifier(out)
    assert model.multi_label
    import csv
    with open(test, newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f)][:6]
    cli = json_lines(run_cli("predict", "--model", out, "--input", test).stdout)[:6]
    for mine, theirs in zip(model.predict(texts), cli):
        assert mine["labels"] == theirs["labels"]
        assert mine["labels"] == [l for l in model.labels if mine["scores"][l] >= 0.5]
        assert_close(mine["scores"], theirs["scores"], 1e-5)
    with pytest.raises(longread.LongreadError, match="--pos-weight"):
        longread.train(train, str(tmp_path / "refused"), model=made, freeze_base=True, class_weights="balanced")


def test_a_multi_label_han_cv_run_tunes_and_calibrates_its_final_model_as_the_cli_does(tmp_path):
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    train = os.path.join(descriptors, "train.csv")
    small = dict(arch="han", multi_label=True, embedding_dim=16, gru_hidden=8, attention_size=16, epochs=2,
                 pos_weight="auto", quiet=True)
    run = longread.train(train, tmp_path / "cv", cv=2, **small)
    pooled = run["cv"]["out_of_fold"]
    rows = json_lines(open(tmp_path / "cv" / "out-of-fold.jsonl").read())
    assert pooled["documents"] == len(rows) == 80
    assert pooled["accuracy"] == pytest.approx(np.mean([sorted(r["labels"]) == sorted(r["predicted"]) for r in rows]))
    assert 0 <= pooled["micro_f1"] <= 1 and run["cv"]["micro_f1_mean"] is not None
    final = str(tmp_path / "final")
    longread.train(train, final, dev_split=0, **small)
    assert longread.Classifier(final).multi_label
    rule = longread.tune_threshold(final, out_of_fold=tmp_path / "cv", write=False)
    cli = run_cli("threshold", "--model", final, "--out-of-fold", str(tmp_path / "cv"), "--dry-run", "--json")
    assert cli.returncode == 0, cli.stderr
    assert rule["decision"]["thresholds"] == json.loads(cli.stdout)["decision"]["thresholds"]
    assert rule["warnings"] == [] and rule["documents"] == 80
    fitted = longread.calibrate(final, out_of_fold=tmp_path / "cv", write=False)
    assert sorted(fitted["temperatures"]) == ["drugs", "language", "violence"]
    assert fitted["log_loss"]["before"] == pytest.approx(pooled["log_loss"], abs=1e-6)


def test_a_multi_label_models_thresholds_are_tuned_per_label_as_the_cli_tunes_them(tmp_path):
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    train, test = os.path.join(descriptors, "train.csv"), os.path.join(descriptors, "test.csv")
    out = str(tmp_path / "descriptors")
    longread.train(train, out, arch="bow", multi_label=True, c_values=[1, 10], quiet=True)
    cli = run_cli("threshold", "--model", out, "--data", test, "--dry-run", "--json")
    assert cli.returncode == 0, cli.stderr
    tuned = longread.tune_threshold(out, data=test, write=False)
    expected = json.loads(cli.stdout)
    assert tuned["decision"]["thresholds"] == expected["decision"]["thresholds"]
    assert tuned["at_threshold"]["macro_avg"] == expected["at_threshold"]["macro_avg"]
    assert not tuned["written"] and not os.path.exists(os.path.join(out, "decision.json"))
    # Limits on how many labels a document carries, kept with the thresholds and applied.
    capped = longread.tune_threshold(out, data=test, top_k=1, min_labels=1)
    assert capped["decision"]["top_k"] == 1 and capped["decision"]["min_labels"] == 1
    for prediction in longread.Classifier(out).predict([open(test).read()[:2000], "nothing here"]):
        assert prediction["labels"] == [max(prediction["scores"], key=prediction["scores"].get)]
    with pytest.raises(longread.InvalidDocumentError, match="below min_labels"):
        longread.tune_threshold(out, data=test, top_k=1, min_labels=2)
    with pytest.raises(longread.LongreadError, match="each label's F1"):
        longread.tune_threshold(out, data=test, metric="accuracy")
    # A temperature per label, as the command line fits it.
    cli = run_cli("calibrate", "--model", out, "--data", train, "--dry-run", "--json")
    assert cli.returncode == 0, cli.stderr
    fitted = longread.calibrate(out, data=train, write=False)
    assert fitted["temperatures"] == json.loads(cli.stdout)["temperatures"]
    assert [label["label"] for label in fitted["labels"]] == ["drugs", "language", "violence"]
    assert not fitted["written"] and not os.path.exists(os.path.join(out, "calibration.json"))
