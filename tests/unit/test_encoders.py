"""Encoder embedding models through mlx-embeddings (the optional extra): an input's vector is the
same alone and in a padded batch, vectors are unit length, mean pooling ignores the padding.

Skipped where mlx-embeddings is not installed. The BERT model is the demo's (mlxhost.demo.encoder);
the XLM-RoBERTa and ModernBERT ones are built here from mlx-embeddings' own classes with their
initial random weights, beside the demo's tokenizer.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("mlx_embeddings")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from mlxhost.demo.encoder import make_encoder_model  # noqa: E402
from mlxhost.worker.engine.encoders import EncoderNotSupported, EncoderPooler, load_encoder  # noqa: E402
from mlxhost.worker.engine.tokenizer import Tokenizer  # noqa: E402

pytestmark = pytest.mark.unit

TEXTS = [
    "the model answers",
    "a much longer question about the weather today and the server's cache, with more words in it",
    "hello",
]
SMALL = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 64}


def _build(path: Path, bert: Path, config: dict[str, object]) -> Path:
    """A model directory of `config` with mlx-embeddings' freshly initialised weights."""
    path.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(bert / name, path / name)
    vocab = json.loads((bert / "config.json").read_text())["vocab_size"]
    config = {**config, **SMALL, "vocab_size": vocab}
    (path / "config.json").write_text(json.dumps(config))
    module = importlib.import_module("mlx_embeddings.models." + str(config["model_type"]).replace("-", "_"))
    mx.random.seed(1)
    model = module.Model(module.ModelArgs.from_dict(config))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    bert = make_encoder_model(root / "bert")
    return {
        "bert": bert,
        "bert-cls": make_encoder_model(root / "bert-cls", pooling="cls"),
        # XLM-R's pad id is 1: its positions count the tokens that are not.
        "xlm_roberta": _build(
            root / "xlmr",
            bert,
            {
                "model_type": "xlm-roberta",
                "max_position_embeddings": 130,
                "pad_token_id": 1,
                "type_vocab_size": 1,
            },
        ),
        # A sliding window narrower than the inputs, so local layers mask as well.
        "modernbert": _build(
            root / "modernbert",
            bert,
            {
                "model_type": "modernbert",
                "architectures": ["ModernBertModel"],
                "max_position_embeddings": 128,
                "local_attention": 8,
                "global_attn_every_n_layers": 3,
            },
        ),
    }


def _rows(tokenizer: object) -> list[list[int]]:
    return [list(tokenizer.encode(text)) for text in TEXTS]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["bert", "xlm_roberta", "modernbert"])
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_an_input_embeds_the_same_alone_and_in_a_padded_batch(
    models: dict[str, Path], name: str, pooling: str
) -> None:
    pooler, tokenizer = load_encoder(models[name])
    rows = _rows(tokenizer)
    assert len({len(r) for r in rows}) == len(rows)  # every row but the longest is padded
    batch = np.array(pooler.embed(rows, pooling))
    assert batch.dtype == np.float32 and batch.shape == (len(rows), pooler.hidden_size)
    for at, row in enumerate(rows):
        alone = np.array(pooler.embed([row], pooling))[0]
        np.testing.assert_allclose(batch[at], alone, atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    # Different texts, different vectors: the model is not constant.
    assert np.abs(batch[0] - batch[1]).max() > 1e-2


def test_mean_pooling_averages_the_real_tokens_only(models: dict[str, Path]) -> None:
    pooler, tokenizer = load_encoder(models["bert"])
    rows = _rows(tokenizer)
    short = min(range(len(rows)), key=lambda at: len(rows[at]))
    hidden, mask = pooler.hidden(rows)
    assert float(mask[short].sum()) == len(rows[short]) < hidden.shape[1]
    own = np.array(hidden[short, : len(rows[short])]).mean(axis=0)
    own /= np.linalg.norm(own)
    np.testing.assert_allclose(np.array(pooler.embed(rows, "mean"))[short], own, atol=1e-5)
    # Averaging the padding in as well gives another vector: the test above can fail.
    everything = np.array(hidden[short]).mean(axis=0)
    everything /= np.linalg.norm(everything)
    assert np.abs(everything - own).max() > 1e-3


def test_without_the_mask_padding_would_change_the_vector(models: dict[str, Path]) -> None:
    """The attention mask is what keeps a padded input's vector its own (the batch test's teeth)."""
    pooler, tokenizer = load_encoder(models["bert"])
    row = _rows(tokenizer)[0]
    padded = mx.array([row + [pooler.pad_id] * 20])
    states = pooler.model(padded).last_hidden_state.astype(mx.float32)  # no mask: padding attended
    unmasked = np.array(states[0, : len(row)]).mean(axis=0)
    unmasked /= np.linalg.norm(unmasked)
    assert np.abs(unmasked - np.array(pooler.embed([row], "mean"))[0]).max() > 1e-3


def test_the_tokenizer_is_the_engines_and_wraps_a_text_in_cls_and_sep(models: dict[str, Path]) -> None:
    pooler, tokenizer = load_encoder(models["bert"])
    ids = list(tokenizer.encode("hello world"))
    assert tokenizer.convert_ids_to_tokens([ids[0], ids[-1]]) == ["[CLS]", "[SEP]"]
    wrapped = Tokenizer(tokenizer)  # what the engine makes of a loaded tokenizer
    assert wrapped.vocab_size == json.loads((models["bert"] / "config.json").read_text())["vocab_size"]
    assert pooler.hidden_size == 32 and pooler.context_length == 128


def test_context_length_of_xlm_roberta_leaves_out_its_pad_positions(models: dict[str, Path]) -> None:
    pooler, _ = load_encoder(models["xlm_roberta"])
    assert pooler.pad_id == 1 and pooler.context_length == 128


def test_an_architecture_mlx_embeddings_lacks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nomic_bert"}))
    with pytest.raises(EncoderNotSupported, match="nomic_bert"):
        load_encoder(tmp_path)


def test_an_encoder_does_not_score(models: dict[str, Path]) -> None:
    pooler, _ = load_encoder(models["bert"])
    assert isinstance(pooler, EncoderPooler)
    with pytest.raises(EncoderNotSupported):
        pooler.score([[2, 3]], 5, 6)
