"""The pooled routes' bodies (wire/embeddings.py) and the embeddings answer (vectors_body)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from mlxhost.wire.embeddings import MAX_INPUTS, EmbeddingRequest, RerankRequest
from mlxhost.wire.errors import InternalError, InvalidRequest
from mlxhost.wire.parsing import parse_body
from mlxhost.worker.api.embeddings import vectors_body

pytestmark = pytest.mark.unit


def parsed(**body: object) -> EmbeddingRequest:
    return parse_body(EmbeddingRequest, json.dumps(body).encode())


@pytest.mark.parametrize(
    ("given", "inputs"),
    [("hi", ["hi"]), (["a", "b"], ["a", "b"]), ([1, 2, 3], [[1, 2, 3]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_each_input_form_is_a_list_of_inputs(given: object, inputs: list[object]) -> None:
    assert parsed(input=given).inputs() == inputs


def test_a_large_body_of_token_lists_is_not_refused_as_bulk() -> None:
    # Past 64 KB a body's shape is checked before pydantic runs; token lists are as long as a context.
    body = {"input": [list(range(2000)) for _ in range(20)]}
    assert len(parsed(**body).inputs()) == 20


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"input": ["x"] * (MAX_INPUTS + 1)}, f"at most {MAX_INPUTS} inputs"),
        ({"input": 3}, "valid string"),
        ({"input": [-1]}, "greater than or equal to 0"),
        ({"input": "x", "encoding_format": "hex"}, "'float' or 'base64'"),
        ({}, "missing required parameter 'input'"),
    ],
)
def test_bad_bodies_are_refused_naming_input_or_the_field(body: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidRequest, match=words):
        parsed(**body).inputs()


def test_rerank_documents_are_strings_or_text_objects() -> None:
    body = {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}
    assert parse_body(RerankRequest, json.dumps(body).encode()).texts() == ["a", "b"]
    with pytest.raises(InvalidRequest, match="documents"):
        parse_body(RerankRequest, json.dumps({"query": "q", "documents": [{"txt": "b"}]}).encode())


def test_the_answer_cuts_renormalises_and_encodes() -> None:
    vector = np.array([3.0, 4.0, 12.0], dtype=np.float32) / 13
    floats = json.loads(vectors_body([vector], 2, "float", "m", 7))
    assert floats["usage"] == {"prompt_tokens": 7, "total_tokens": 7} and floats["model"] == "m"
    assert np.allclose(floats["data"][0]["embedding"], [0.6, 0.8])
    packed = json.loads(vectors_body([vector], None, "base64", "m", 7))["data"][0]["embedding"]
    assert np.array_equal(np.frombuffer(base64.b64decode(packed), dtype="<f4"), vector)


def test_floats_are_written_short_and_read_back_as_the_same_float32s() -> None:
    rng = np.random.default_rng(3)
    vectors = [rng.standard_normal(256).astype(np.float32) * 1e-3 for _ in range(8)]
    vectors[0][:4] = [0.0, -0.0, 1e-30, -3.4e38]
    body = vectors_body(vectors, None, "float", "m", 1)
    read = np.array([d["embedding"] for d in json.loads(body)["data"]], dtype=np.float32)
    assert np.array_equal(read, np.stack(vectors))
    assert len(body) < len(json.dumps([v.tolist() for v in vectors]))


def test_a_vector_that_is_not_finite_is_an_error_not_invalid_json() -> None:
    with pytest.raises(InternalError, match="not finite"):
        vectors_body([np.array([np.nan, 1.0], dtype=np.float32)], None, "float", "m", 1)
