"""What a model is for, as its [[model]] or its files say (mlxhost/catalog/tasks.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mlxhost.config_values import InvalidValue
from mlxhost.demo.embedding import QUERY_PROMPT, write_sentence_transformers
from mlxhost.catalog.spec import model_list
from mlxhost.catalog.tasks import ModelKind, detect, encoder_problem, task_list

pytestmark = pytest.mark.unit


def model_dir(path: Path, **config: object) -> Path:
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8, **config}))
    return path


def test_a_causal_lm_generates(tmp_path: Path) -> None:
    assert detect(model_dir(tmp_path / "m")) == ModelKind(model_type="llama")


def test_a_sentence_transformers_model_embeds_with_its_pooling_and_prompts(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "m")
    write_sentence_transformers(path)
    kind = detect(path)
    assert kind.tasks == ("embed",) and kind.pooling == "last" and kind.matryoshka
    assert kind.prompts == {"query": QUERY_PROMPT, "document": ""}


def test_mean_pooling_is_read_from_the_module_the_model_names(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "m", model_type="bert")
    (path / "modules.json").write_text(
        json.dumps([{"path": "pool", "type": "sentence_transformers.models.Pooling"}])
    )
    (path / "pool").mkdir()
    (path / "pool" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    kind = detect(path)
    assert kind.tasks == ("embed",) and kind.pooling == "mean" and kind.encoder


def test_a_sequence_classifier_reranks(tmp_path: Path) -> None:
    path = model_dir(
        tmp_path / "m", model_type="xlm-roberta", architectures=["XLMRobertaForSequenceClassification"]
    )
    assert detect(path).tasks == ("rerank",) and detect(path).pooling == "cls"


def test_an_encoder_without_mlx_embeddings_is_refused_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = detect(model_dir(tmp_path / "m", model_type="bert"))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "mlx_embeddings" else real(name)
    )
    problem = encoder_problem(kind)
    assert problem is not None and "pip install 'mlxhost[embeddings]'" in problem
    assert encoder_problem(ModelKind()) is None


def test_an_encoder_is_refused_for_what_mlx_embeddings_cannot_do(tmp_path: Path) -> None:
    roberta = detect(model_dir(tmp_path / "r", model_type="roberta"))
    assert "mlx-embeddings runs only bert, modernbert, xlm_roberta" in (encoder_problem(roberta) or "")
    classifier = detect(
        model_dir(
            tmp_path / "c", model_type="xlm-roberta", architectures=["XLMRobertaForSequenceClassification"]
        )
    )
    assert "cannot generate or rerank" in (encoder_problem(classifier) or "")


def test_a_configured_task_wins_over_the_files(tmp_path: Path) -> None:
    path = model_dir(tmp_path / "m")
    assert detect(path).with_tasks(("rerank",)).tasks == ("rerank",)
    assert detect(path).with_tasks(None) == detect(path)


@pytest.mark.parametrize(
    ("value", "tasks"),
    [
        ("embed", ("embed",)),
        (["generate", "embed"], ("generate", "embed")),
        (["rerank", "rerank"], ("rerank",)),
    ],
)
def test_task_list_takes_one_or_several(value: object, tasks: tuple[str, ...]) -> None:
    assert task_list(value) == tasks


@pytest.mark.parametrize("value", ["chat", [], ["embed", "classify"], 3])
def test_a_model_with_an_unknown_task_is_refused_naming_it(value: object) -> None:
    with pytest.raises(InvalidValue, match="model 'm': 'task' must be"):
        model_list([{"id": "m", "path": "/models/m", "task": value}])


def test_a_group_does_not_embed_yet() -> None:
    with pytest.raises(InvalidValue, match="not served by a group"):
        model_list(
            [
                {
                    "id": "m",
                    "path": "/m",
                    "task": "embed",
                    "ranks": 2,
                    "backend": "ring",
                    "hosts": ["10.0.0.1", "10.0.0.2"],
                }
            ]
        )
