"""longread.ray on a real local Ray cluster (2 CPUs, 2 actors): 200 documents, each exactly
once in the output, equal to the CLI's predictions; an actor that dies mid-run is restarted
and still no document is lost or duplicated."""

import glob
import json
import os

import pytest

from conftest import FIXTURES, assert_close, json_lines, longread as run_cli

if os.environ.get("CI") == "true":
    import ray  # CI installs it (.ci/run): a missing Ray is a failure there
else:
    ray = pytest.importorskip("ray", reason="pip install 'ray[data]' pyarrow (CI=true makes this a failure)")

import longread.ray  # noqa: E402

MODEL = os.path.join(FIXTURES, "hier", "trained-bert-attention")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """200 documents as JSON lines, and what `longread predict` says of each (by id)."""
    with open(os.path.join(FIXTURES, "hier", "documents.jsonl")) as f:
        base = [json.loads(line)["text"] for line in f]
    docs = [{"id": f"doc-{i:03d}", "text": f"{base[i % len(base)]} Item {i}."} for i in range(200)]
    path = tmp_path_factory.mktemp("ray") / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    cli = run_cli("predict", "--model", MODEL, "--input", str(path))
    assert cli.returncode == 0, cli.stderr
    expected = {line.pop("id"): line for line in json_lines(cli.stdout)}
    return path, expected


def read_rows(directory, fmt):
    if fmt == "json":
        return [row for f in sorted(glob.glob(os.path.join(directory, "*.json*"))) for row in json_lines(open(f).read())]
    import pyarrow.parquet as pq
    return pq.read_table(directory).to_pylist()


def check(rows, expected):
    ids = [row["id"] for row in rows]
    assert sorted(ids) == sorted(expected), "every document exactly once"
    for row in rows:
        assert row["error"] is None
        prediction = json.loads(row["prediction"])
        assert row["label"] == prediction["label"]
        assert_close(prediction, expected[row["id"]], 1e-6)


def test_two_actors_classify_every_document_once_as_the_cli_does(cluster, documents, tmp_path):
    path, expected = documents
    out = tmp_path / "out"
    longread.ray.classify(str(path), str(out), MODEL, concurrency=2, threads_per_actor=1, batch_size=16,
                          num_cpus_per_actor=0.5, output_format="json")
    check(read_rows(str(out), "json"), expected)


def test_a_csv_input_is_read_as_the_cli_reads_it(cluster, documents, tmp_path):
    """Ids kept as written, texts with commas, quotes and line breaks in quoted fields."""
    import csv

    path, expected = documents
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["text"] = 'She said "no", then left.\nThe end.'
    rows[0]["id"] = "007"
    table = tmp_path / "docs.csv"
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text"])
        writer.writeheader()
        writer.writerows(rows)
    cli = run_cli("predict", "--model", MODEL, "--input", str(table))
    assert cli.returncode == 0, cli.stderr
    expected = {line.pop("id"): line for line in json_lines(cli.stdout)}
    assert "007" in expected
    out = tmp_path / "out"
    longread.ray.classify(str(table), str(out), MODEL, concurrency=2, threads_per_actor=1, batch_size=16,
                          num_cpus_per_actor=0.5, output_format="json")
    check(read_rows(str(out), "json"), expected)


def test_defaults_that_would_wait_forever_are_refused_naming_both_numbers(cluster, documents, tmp_path):
    """Unchecked, concurrency=2 with the defaults on ray.init(num_cpus=2) hung forever at
    "Repartition: 0/1": the actors reserved both CPUs and Ray's own tasks never got one."""
    path, _ = documents
    with pytest.raises(ValueError, match=r"concurrency=2 actors × num_cpus_per_actor=1 reserve 2 of the cluster's 2 CPUs"):
        longread.ray.classify(str(path), str(tmp_path / "out"), MODEL, concurrency=2)
    assert not (tmp_path / "out").exists()


def test_an_actor_that_dies_mid_run_is_restarted_and_nothing_is_lost(cluster, documents, tmp_path):
    path, expected = documents
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in path.read_text().splitlines()]
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    died = tmp_path / "died"
    out = tmp_path / "out"
    longread.ray.classify(str(parquet), str(out), MODEL, concurrency=2, threads_per_actor=1, batch_size=16,
                          num_cpus_per_actor=0.5, _fail_once_file=str(died))
    assert died.exists(), "an actor was killed mid-run"
    check(read_rows(str(out), "parquet"), expected)


def test_gzip_compressed_inputs_are_read_as_the_cli_reads_them(cluster, documents, tmp_path):
    """`docs.jsonl.gz` and `docs.csv.gz`, as `longread predict` reads them."""
    import csv
    import gzip

    path, expected = documents
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    jsonl = tmp_path / "docs.jsonl.gz"
    with gzip.open(jsonl, "wt") as f:
        f.write(path.read_text())
    table = tmp_path / "docs.csv.gz"
    with gzip.open(table, "wt", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["id", "text"])
        writer.writeheader()
        writer.writerows(rows)
    for compressed in (jsonl, table):
        cli = run_cli("predict", "--model", MODEL, "--input", str(compressed))
        assert cli.returncode == 0, cli.stderr
        assert {line.pop("id"): line for line in json_lines(cli.stdout)} == expected
        out = tmp_path / f"out-{compressed.name}"
        longread.ray.classify(str(compressed), str(out), MODEL, concurrency=2, threads_per_actor=1, batch_size=16,
                              num_cpus_per_actor=0.5, output_format="json")
        check(read_rows(str(out), "json"), expected)


def test_a_multi_label_models_rows_carry_each_documents_list_of_labels(cluster, tmp_path):
    descriptors = os.path.join(os.path.dirname(FIXTURES), "..", "examples", "descriptors")
    model = str(tmp_path / "descriptors")
    longread.train(os.path.join(descriptors, "train.csv"), model, arch="bow", multi_label=True, c_values=[1, 10],
                   quiet=True)
    test = os.path.join(descriptors, "test.csv")
    cli = run_cli("predict", "--model", model, "--input", test)
    assert cli.returncode == 0, cli.stderr
    expected = {line.pop("id"): line for line in json_lines(cli.stdout)}
    assert any(len(line["labels"]) != 1 for line in expected.values()), "sets of every size, empty ones too"
    for fmt in ("json", "parquet"):
        out = tmp_path / f"out-{fmt}"
        longread.ray.classify(test, str(out), model, concurrency=2, threads_per_actor=1, batch_size=8,
                              num_cpus_per_actor=0.5, output_format=fmt)
        rows = read_rows(str(out), fmt)
        check(rows, expected)
        for row in rows:
            assert list(row["labels"]) == expected[row["id"]]["labels"], row
