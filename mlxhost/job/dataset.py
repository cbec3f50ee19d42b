"""A fine-tune's dataset directory, read into mlx-lm's own dataset classes, with errors that name the
file and the line.

`mlx_lm.lora` reads `train.jsonl` and `valid.jsonl` (and `test.jsonl`, which a job does not use)
from the `data` directory; each line is a chat (`messages`), a completion (`prompt`, `completion`)
or a text (`text`), as mlx-lm's `create_dataset` decides from the first line. Two steps here are
our glue, because mlx-lm's loader has no way to say where a problem is: the lines are read by the
reader the host checked them with at submission (`mlxhost.wire.admin.dataset_lines`: a bad line
fails as `train.jsonl line 7: ...`, not as a bare JSONDecodeError, and no line is read past its
bound), and every example is tokenized before training starts, so a bad example 900 lines down
fails the job at once instead of at the iteration that first draws it. The tokens go into the
`CacheDataset` training reads, so that costs no second pass.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_lm.tuner.datasets import CacheDataset, create_dataset

from mlxhost.job import JobError
from mlxhost.wire.admin.dataset_lines import DatasetError, read_examples
from mlxhost.wire.inert import excerpt

__all__ = ["Split", "read_lines", "tokenize"]


@dataclass(frozen=True)
class Split:
    """One file's examples, parsed; `lines[i]` is the line example i came from."""

    path: Path
    examples: list[dict[str, Any]]
    lines: list[int]

    def __len__(self) -> int:
        return len(self.examples)


def read_lines(path: Path) -> Split:
    """The file's examples, read as the host read them when the job was submitted (the file may
    have changed since, so each line is bounded here too, never read whole)."""
    examples: list[dict[str, Any]] = []
    lines: list[int] = []
    try:
        with path.open("rb") as file:
            for number, example in read_examples(file, str(path)):
                examples.append(example)
                lines.append(number)
    except DatasetError as exc:
        raise JobError(str(exc)) from None
    except OSError as exc:
        raise JobError(f"cannot read {path}: {exc.strerror or exc}") from None
    return Split(path, examples, lines)


def tokenize(split: Split, tokenizer: Any, config: types.SimpleNamespace) -> tuple[CacheDataset, list[int]]:
    """The split as the `CacheDataset` mlx-lm trains on, every example already tokenized; and each
    example's token count."""
    if not split.examples:
        return CacheDataset([]), []  # an empty one is how train() is told there is no validation
    try:
        dataset = CacheDataset(create_dataset(split.examples, tokenizer, config))
    except ValueError as exc:  # the first line is in none of the formats
        raise JobError(f"{split.path} line {split.lines[0]}: {_oneline(exc)}") from None
    lengths = []
    for index, line in enumerate(split.lines):
        try:
            tokens, _offset = dataset[index]
        except KeyError as exc:
            where = f"{split.path} line {line}"
            raise JobError(f"{where}: no {exc.args[0]!r} (the file's first line set its format)") from None
        except Exception as exc:  # noqa: BLE001 - a chat template or tokenizer that refuses the example
            raise JobError(f"{split.path} line {line}: {type(exc).__name__}: {_oneline(exc)}") from None
        lengths.append(len(tokens))
    return dataset, lengths


def _oneline(exc: BaseException) -> str:
    # mlx-lm's format error spans two lines (the message, then a link to its LORA.md)
    return excerpt(" ".join(str(exc).split()), 300)
