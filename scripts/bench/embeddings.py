"""--embeddings: `POST /v1/embeddings` on an isolated mlxhost server against the raw forward of the
same model in this process (`bench.embeddings_raw`), one request at a time.

The model: the demo embedding model of --size (`mlxhost.demo`, task "embed": a llama with a
sentence-transformers pooling config, last token, normalised), built once in the cache; or
--model, which must be an embedding model. The run's chat model, which every run of the bench
loads first, is not used.

The cells: short inputs (~16 tokens) and mixed ones (16..512 tokens, uniformly drawn) in requests of
1, 16 and 64 inputs (`RUN_INPUTS` says how many inputs a run sends: enough for a figure, few enough
for a run of about three minutes on the tiny model); then 1,000 code chunks of ~200 tokens in
requests of 64 (`bench.embeddings_inputs` makes every input, the same each run). Each run is timed
from its first request's send to its last answer read into arrays, the host's arms sending the
texts and reading floats, as a client does; the raw arm gets the texts' token ids (encoded
beforehand by the same tokenizer) and computes the same passes the worker makes of them.

The rounds (--repeats, 3 by default; 1 with --quick or --smoke) run every cell's arms back to back
in an order that rotates from round to round, then, every other round (`CHUNK_EVERY`), the
chunks, raw and host in alternating order;
`bench.embeddings_figures` has the arithmetic. Raw and host run back to back in every cell; for
the short inputs at 64 a request three more arms follow, each taking one thing away from the
host's request, and at 64 this process times the parts it can do itself (see there: `Breakdown`).
A warm-up first: a mixed request (its vectors and passes compared between
the two paths: `Agreement`) and a short one on every arm. This process collects no garbage while a
run is timed.

Of mlxhost the bench imports here, besides the demo model and the harness: the worker's
`vectors_body` (to time the answer's JSON as the worker writes it) and, in the raw path, its
pass queue and `hidden_body`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import hosts
from bench.embeddings_figures import (
    ARMS,
    BATCHES,
    CHUNKS,
    EXTRA_ARMS,
    PLAIN_ARMS,
    TARGET,
    Agreement,
    ComponentRun,
    EmbeddingModel,
    EmbeddingRun,
    EmbeddingsDocument,
    EmbeddingsSetup,
    EmbeddingsSummary,
    breakdown_of,
    cells_of,
    chunk_figures,
    print_embeddings,
)
from bench.embeddings_inputs import (
    CODE_TOKENS,
    MIXED_TOKENS,
    SHORT_TOKENS,
    Encode,
    Inputs,
    code_chunks,
    mixed_lengths,
    prose_inputs,
)
from bench.embeddings_raw import PASS_ROWS, PASS_TOKENS, RawEmbedder
from bench.figures import progress
from bench.join_gap import collector_paused
from bench.plan import Plan
from bench.settings import REQUEST_TIMEOUT_S
from mlxhost import demo
from mlxhost.worker.api.embeddings import vectors_body

__all__ = ["EmbeddingsDocument", "measure_embeddings", "print_embeddings"]

# Inputs a run sends, by shape and batch (the mixed ones cost ~16 times the short ones' tokens).
RUN_INPUTS = {
    ("short", 1): 64, ("short", 16): 256, ("short", 64): 256,
    ("mixed", 1): 16, ("mixed", 16): 32, ("mixed", 64): 64,
}  # fmt: skip
CHUNK_COUNT, CHUNK_BATCH = 1000, 64
# The chunks run in every other round (the first, the third...): a run of them takes ~17 s on the
# tiny model, and a default run is meant to take about three minutes.
CHUNK_EVERY = 2
# The host's other arms (see bench.embeddings_figures) run on the short inputs alone: on the mixed
# ones a request takes seconds, and the machine's noise over seconds swamps the milliseconds each
# arm takes away (the parts this process times are timed for both shapes).
BREAKDOWN_SHAPES = ("short",)
SMOKE_RUN_INPUTS = 64  # --smoke: at most this many inputs a run, and as many chunks
SMOKE_MIXED_TOKENS = (16, 64)
SEEDS = {"short": 101, "mixed": 202, "lengths": 303, CHUNKS: 404}
AGREEMENT_INPUTS = 16  # the mixed warm-up request, compared between the paths
ROUTE = "/v1/embeddings"


class EmbeddingsError(Exception):
    """The server refused or broke a request, or the model does not embed."""


def embedding_model(plan: Plan) -> Path:
    """--model, or the demo embedding model of --size (built once, cached)."""
    if plan.size == "custom":
        return plan.model_path
    progress(f"building the {plan.size} demo embedding model (once; it is cached)")
    return demo.cached_model(f"bench-{plan.size}-embed", plan.size, task="embed")


def workload(plan: Plan, raw: RawEmbedder) -> tuple[dict[str, Inputs], dict[tuple[str, int], int]]:
    """Every input the run sends (by shape), and the inputs of a run by cell."""
    runs = dict(RUN_INPUTS)
    chunks, bounds = CHUNK_COUNT, MIXED_TOKENS
    if plan.smoke:
        runs = {cell: min(count, SMOKE_RUN_INPUTS) for cell, count in runs.items()}
        chunks, bounds = SMOKE_RUN_INPUTS, SMOKE_MIXED_TOKENS
    encode, decode = raw.encode, raw.decode
    most = {shape: max(n for (s, _), n in runs.items() if s == shape) for shape in ("short", "mixed")}
    most["mixed"] = max(most["mixed"], AGREEMENT_INPUTS)
    lengths = mixed_lengths(most["mixed"], SEEDS["lengths"], bounds)
    inputs = {
        "short": prose_inputs([SHORT_TOKENS] * most["short"], SEEDS["short"], encode, decode),
        "mixed": prose_inputs(lengths, SEEDS["mixed"], encode, decode),
        CHUNKS: code_chunks(chunks, SEEDS[CHUNKS], encode, decode, CODE_TOKENS),
    }
    return inputs, runs


class Arms:
    """The paths a request can take: raw in this process, or one of the host's arms over HTTP."""

    def __init__(self, raw: RawEmbedder, parent: httpx.Client, worker: httpx.Client) -> None:
        self.raw = raw
        self.parent = parent
        self.worker = worker
        self.tokens_agree = True

    def request(self, arm: str, inputs: Inputs) -> np.ndarray:
        """One request's vectors, [inputs, width]."""
        if arm == "raw":
            return self.raw.embed(inputs.ids)
        body: dict[str, Any] = {"input": inputs.ids if arm == "host_ids" else inputs.texts}
        if arm == "host_base64":
            body["encoding_format"] = "base64"
        client = self.worker if arm == "worker" else self.parent
        response = client.post(ROUTE, json=body)
        if response.status_code != 200:
            raise EmbeddingsError(f"{arm}: {ROUTE} answered {response.status_code}: {response.text[:500]}")
        answer = response.json()
        if answer["usage"]["prompt_tokens"] != inputs.tokens:
            self.tokens_agree = False
        return read_vectors(answer)

    def run(self, arm: str, shape: str, batch: int, number: int, inputs: Inputs) -> EmbeddingRun:
        requests = inputs.requests(batch)
        with collector_paused():
            began = time.perf_counter()
            for request in requests:
                self.request(arm, request)
            seconds = time.perf_counter() - began
        return EmbeddingRun(
            shape, batch, arm, number, len(inputs.texts), inputs.tokens, len(requests), seconds
        )


def read_vectors(answer: dict[str, Any]) -> np.ndarray:
    """The answer's vectors as a client reads them, floats or base64 (little-endian float32)."""
    rows = [item["embedding"] for item in sorted(answer["data"], key=lambda item: item["index"])]
    if rows and isinstance(rows[0], str):
        return np.stack([np.frombuffer(base64.b64decode(row), dtype="<f4") for row in rows])
    return np.array(rows, dtype=np.float32)


def components(
    shape: str, number: int, inputs: Inputs, encode: Encode, width: int, model: str
) -> ComponentRun:
    """One request's parts that this process can do alone, timed (see `ComponentRun`). The answer
    is written from random vectors of the model's width: floats take as long to write whatever
    their values, and the forward's seconds are the raw arm's."""
    vectors = list(
        np.random.default_rng(number).standard_normal((len(inputs.texts), width), dtype=np.float32)
    )
    began = time.perf_counter()
    for text in inputs.texts:
        encode(text)
    encoded = time.perf_counter()
    json.dumps({"input": inputs.texts}).encode()
    requested = time.perf_counter()
    answer = vectors_body(vectors, None, "float", model, inputs.tokens)
    answered = time.perf_counter()
    read_vectors(json.loads(answer))
    parsed = time.perf_counter()
    return ComponentRun(
        shape, number, encoded - began, requested - encoded, answered - requested, parsed - answered
    )


def rotated(arms: tuple[str, ...], number: int) -> tuple[str, ...]:
    """The arms in round `number`'s order: rotated one place a round, so drift favours none."""
    shift = number % len(arms)
    return arms[shift:] + arms[:shift]


def order(shape: str, batch: int, number: int) -> tuple[str, ...]:
    """A cell's arms in round `number`: raw and host back to back (their ratio is the figure), in
    alternating order; then, for the short inputs at the largest batch, the host's other arms."""
    pair = rotated(PLAIN_ARMS, number)
    if shape in BREAKDOWN_SHAPES and batch == max(BATCHES):
        return pair + rotated(EXTRA_ARMS, number)
    return pair


def worker_pooled(worker: httpx.Client) -> dict[str, int]:
    return dict(worker.get("/health").json()["pooled"])


def agreement(arms: Arms, inputs: Inputs) -> Agreement:
    """The mixed warm-up request on both paths: vectors and passes compared."""
    raw = arms.raw.counters
    raw_before, worker_before = (raw.passes, raw.padded_tokens), worker_pooled(arms.worker)
    raw_vectors = arms.request("raw", inputs)
    host_vectors = arms.request("host", inputs)
    worker_after = worker_pooled(arms.worker)
    return Agreement(
        max_abs_difference=float(np.abs(raw_vectors - host_vectors).max()),
        raw_passes=raw.passes - raw_before[0],
        worker_passes=worker_after["passes"] - worker_before["passes"],
        raw_padded_tokens=raw.padded_tokens - raw_before[1],
        worker_padded_tokens=worker_after["padded_tokens"] - worker_before["padded_tokens"],
        tokens_agree=True,  # set from every request at the end
    )


def cells(runs: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    """The cells in the order a round runs them: the short inputs first, each by batch."""
    return sorted(runs, key=lambda cell: (cell[0] != "short", cell[1]))


def measure_embeddings(plan: Plan) -> EmbeddingsSummary:
    """The whole --embeddings run (see the module's docstring), the server stopped however it ends."""
    path = embedding_model(plan)
    progress(f"loading {path} in this process (the raw path)")
    raw = RawEmbedder(path)
    inputs, runs = workload(plan, raw)
    rounds = plan.rounds(1)
    progress(f"starting the isolated server on {path}")
    began = time.perf_counter()
    host = hosts.start("embeddings", path, plan.max_batch)
    ready_s = time.perf_counter() - began
    measured: list[EmbeddingRun] = []
    parts: list[ComponentRun] = []
    with (
        hosts.running(host),
        httpx.Client(base_url=host.url, headers=hosts.ADMIN_HEADERS, timeout=REQUEST_TIMEOUT_S) as parent,
    ):
        health = parent.get("/health").json()
        model_id = host.running.models[0]
        socket = health["workers"][0]["socket"]
        transport = httpx.HTTPTransport(uds=socket)
        with httpx.Client(base_url="http://worker", transport=transport, timeout=REQUEST_TIMEOUT_S) as worker:
            arms = Arms(raw, parent, worker)
            progress("warming up: a mixed request on both paths (compared), a short one on every arm")
            agreed = agreement(arms, inputs["mixed"].take(AGREEMENT_INPUTS))
            for arm in ARMS:
                arms.request(arm, inputs["short"].take(16))
            for number in range(rounds):
                progress(f"round {number + 1} of {rounds}")
                for shape, batch in cells(runs):
                    mine = inputs[shape].take(runs[shape, batch])
                    for arm in order(shape, batch, number):
                        measured.append(arms.run(arm, shape, batch, number, mine))
                    if batch == max(BATCHES):
                        request = mine.requests(batch)[0]
                        parts.append(components(shape, number, request, raw.encode, raw.width, model_id))
                if number % CHUNK_EVERY == 0:  # the chunks: see CHUNK_EVERY
                    for arm in rotated(PLAIN_ARMS, number // CHUNK_EVERY):
                        measured.append(arms.run(arm, CHUNKS, CHUNK_BATCH, number, inputs[CHUNKS]))
            finished = worker_pooled(worker)
    progress(f"the worker's pooled passes over the run: {finished}")
    return EmbeddingsSummary(
        model=EmbeddingModel(str(path), plan.size, raw.parameters, raw.width, raw.load_s, ready_s),
        setup=EmbeddingsSetup(
            short_tokens=SHORT_TOKENS,
            mixed_tokens=list(SMOKE_MIXED_TOKENS if plan.smoke else MIXED_TOKENS),
            code_tokens=CODE_TOKENS,
            pass_tokens=PASS_TOKENS,
            pass_rows=PASS_ROWS,
            server_options=[],
        ),
        rounds=rounds,
        target=TARGET,
        cells=cells_of(measured, BATCHES),
        breakdown={shape: breakdown_of(measured, parts, shape, max(BATCHES)) for shape in ("short", "mixed")},
        chunks=chunk_figures(measured, CHUNK_BATCH),
        agreement=dataclasses.replace(agreed, tokens_agree=arms.tokens_agree),
        runs=measured,
        components=parts,
    )
