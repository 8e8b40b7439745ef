"""`longread serve --embedding-model` answers OpenAI's own Python client, which asks for
base64-encoded vectors unless told otherwise (the server refused those: "must be float")."""

import os
import re
import struct
import subprocess

import pytest

from conftest import FIXTURES, assert_close, binary, json_lines, longread, minilm

try:
    import openai
except ImportError:
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("the openai package is a test extra (pip install './python[test]')", allow_module_level=True)


@pytest.fixture
def server():
    model = minilm()
    process = subprocess.Popen(
        [binary(), "serve", "--model", os.path.join(FIXTURES, "hier", "bert-attention"), "--embedding-model", model, "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        assert found, f"no address in {line!r}; stderr: {process.stderr.read() if process.poll() is not None else ''}"
        yield model, found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_openai_client_gets_the_cli_embeddings(server, tmp_path):
    model, address = server
    client = openai.OpenAI(base_url=f"{address}/v1", api_key="unused", max_retries=0, timeout=60)
    texts = ["What is deep learning?", "The committee met on Tuesday."]
    answer = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)  # base64 on the wire
    assert [d.index for d in answer.data] == [0, 1]
    assert answer.usage.prompt_tokens > 0
    input_path = tmp_path / "texts.jsonl"
    input_path.write_text("".join(f'{{"text": "{t}"}}\n' for t in texts))
    cli = json_lines(longread("embed", "--model", model, "--input", str(input_path), "--normalize", "-q").stdout)
    for served, line in zip(answer.data, cli):
        assert len(served.embedding) == 384
        assert_close(served.embedding, line["embedding"], tol=1e-5)
    floats = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0], encoding_format="float")
    as_f32 = lambda xs: [struct.unpack("<f", struct.pack("<f", x))[0] for x in xs]  # noqa: E731
    assert as_f32(floats.data[0].embedding) == answer.data[0].embedding, "the same f32 values either way"
    short = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0], dimensions=32)
    assert len(short.data[0].embedding) == 32
    assert abs(sum(x * x for x in short.data[0].embedding) - 1.0) < 1e-5
    with pytest.raises(openai.UnprocessableEntityError, match="more than the model's 384"):
        client.embeddings.create(model="all-MiniLM-L6-v2", input=texts[0], dimensions=1000)
    # models.list() and models.retrieve(): the embedding model by its directory's name.
    listed = client.models.list()
    assert [m.id for m in listed.data] == [os.path.basename(model)]
    assert client.models.retrieve(os.path.basename(model)).owned_by == "longread"
    with pytest.raises(openai.NotFoundError, match="`gpt-4` does not exist"):
        client.models.retrieve("gpt-4")
