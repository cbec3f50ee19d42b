"""What is on disk (`mlxhost.catalog.library`) and `mlxhost models` (`mlxhost.client.library`).

The Hugging Face cache is a real one: the repos are pulled by `catalog.hub.pull` (and, for one
mlxhost would refuse to pull, by huggingface_hub's own `snapshot_download`) from the loopback hub
(`mlxhost.testing_hub`), once per module, and copied for each test. The state directory holds what
mlxhost writes there: a converted model, jobs' outputs, and the job store's records of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from huggingface_hub import constants, scan_cache_dir, snapshot_download

from mlxhost.catalog import hub as catalog_hub
from mlxhost.catalog import library
from mlxhost.catalog.library import LocalModel, UnknownLocalModel
from mlxhost.client import library as client
from mlxhost.client.library import HostView, render_models, run_models
from mlxhost.demo import ensure_demo_model
from mlxhost.host.jobs.store import JobStore
from mlxhost.testing_hub import HubServer
from mlxhost.wire.admin import ModelRecord
from mlxhost.wire.admin.jobs import JobRecord, JobResult

pytestmark = pytest.mark.unit

TINY = "mlx-community/tiny"
TINY_4BIT = "mlx-community/tiny-4bit"
PYTORCH = "org/pytorch-only"
ODD = "org/odd-arch"
QUANTIZE_JOB = "a1b2c3d4"
FINETUNE_JOB = "f0f0f0f0"
LOST_JOB = "0badc0de"  # an output whose record the store does not have
PULL_JOB = "9e9e9e9e"


@dataclass(frozen=True)
class Pulled:
    cache: Path  # the template: each test works on a copy
    commits: dict[str, str]  # by repo
    folders: dict[str, Path]  # what each repo was made of


def _variant(source: Path, target: Path, **config: object) -> Path:
    shutil.copytree(source, target)
    data = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps(data | config))
    return target


@pytest.fixture(scope="module")
def pulled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pulled]:
    root = tmp_path_factory.mktemp("library")
    demo = ensure_demo_model(size="tiny")
    folders = {
        TINY: _variant(demo, root / "tiny"),
        TINY_4BIT: _variant(demo, root / "tiny-4bit", quantization={"group_size": 64, "bits": 4}),
        ODD: _variant(demo, root / "odd", model_type="notarealarch", architectures=["NotARealArchForLM"]),
    }
    pytorch = folders[PYTORCH] = root / "pytorch"
    pytorch.mkdir()
    (pytorch / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (pytorch / "pytorch_model.bin").write_bytes(os.urandom(4096))
    cache = root / "cache"
    with HubServer() as server, pytest.MonkeyPatch.context() as patch:
        commits = {repo: server.add_repo(repo, folder) for repo, folder in folders.items()}
        patch.setenv("HF_HUB_CACHE", str(cache))
        patch.delenv("HF_TOKEN", raising=False)
        patch.setattr(constants, "ENDPOINT", server.endpoint)
        template = server.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        patch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        patch.setattr(constants, "HF_HUB_CACHE", str(cache))
        patch.setattr(constants, "HF_TOKEN_PATH", str(root / "no-token"))
        for repo in (TINY, TINY_4BIT, ODD):
            found, folder = catalog_hub.pull(repo)
            assert found.commit == commits[repo] and (folder / "model.safetensors").is_file()
        # mlxhost refuses to pull weights it cannot read; huggingface_hub's own download does not.
        snapshot_download(PYTORCH)
    yield Pulled(cache, commits, folders)


@pytest.fixture
def cache(pulled: Pulled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's copy of the cache (its links are relative: a copy is a cache), made the current one."""
    folder = tmp_path / "hf-cache"
    shutil.copytree(pulled.cache, folder, symlinks=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(folder))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(folder))
    runtime = tmp_path / "run"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))  # no local host to find
    monkeypatch.delenv("MLXHOST_ADMIN_TOKEN", raising=False)
    return folder


def _job(job_id: str, kind: str, model: str, options: dict[str, object], result: str | None) -> JobRecord:
    return JobRecord(
        id=job_id, kind=kind, model=model, state="succeeded", options=options, progress=None,
        result=None if result is None else JobResult(model=result, path="-"), error=None, pid=None,
        created_at=1, started_at=2, ended_at=3,
    )  # fmt: skip


@pytest.fixture
def state(pulled: Pulled, tmp_path: Path) -> Path:
    """A state directory as mlxhost leaves it: a converted model, three jobs' outputs, a pull's."""
    root = tmp_path / "state"
    converted = shutil.copytree(pulled.folders[TINY_4BIT], root / "models" / "mlx-community--tiny-q4")
    source = {"repo": TINY, "commit": pulled.commits[TINY], "bits": 4}
    (converted / "source.json").write_text(json.dumps(source))
    shutil.copytree(pulled.folders[TINY_4BIT], root / "jobs" / QUANTIZE_JOB / "output")
    adapters = root / "jobs" / FINETUNE_JOB / "output"
    adapters.mkdir(parents=True)
    (adapters / "adapter_config.json").write_text(json.dumps({"fine_tune_type": "lora", "model": "gone"}))
    (adapters / "adapters.safetensors").write_bytes(b"\0" * 100)
    lost = shutil.copytree(pulled.folders[TINY], root / "jobs" / LOST_JOB / "output")
    spec = {"kind": "fuse", "model_path": str(pulled.folders[TINY])}
    (lost.parent / "spec.json").write_text(json.dumps(spec))
    (root / "jobs" / PULL_JOB / "output").mkdir(parents=True)
    (root / "jobs" / PULL_JOB / "output" / "source.json").write_text(json.dumps({"repo": TINY, "path": "x"}))
    (root / "jobs" / "5ca1ab1e" / "output.partial").mkdir(parents=True)  # a job still running
    store = JobStore(root / "jobs.db")
    store.create(_job(QUANTIZE_JOB, "quantize", "tiny", {"bits": 4}, f"tiny-q4-{QUANTIZE_JOB}"))
    store.create(_job(FINETUNE_JOB, "finetune", "tiny", {"model_path": str(pulled.folders[TINY])}, None))
    store.create(_job(PULL_JOB, "pull", TINY, {"repo": TINY}, TINY))
    store.close()
    return root


def by_id(models: list[LocalModel]) -> dict[str, LocalModel]:
    return {m.id: m for m in models}


def test_the_cache_and_the_state_dir_listed(pulled: Pulled, cache: Path, state: Path) -> None:
    started = time.time()
    models = library.list_models(state)
    # The cache's repos by id, then the state directory's outputs by id; no pull job's, no partial one.
    assert [m.id for m in models] == [
        TINY, TINY_4BIT, ODD, PYTORCH,
        f"job-{LOST_JOB}", "mlx-community--tiny-q4", f"tiny-lora-{FINETUNE_JOB}", f"tiny-q4-{QUANTIZE_JOB}",
    ]  # fmt: skip
    assert [m.source for m in models] == ["hf-cache"] * 4 + ["state-dir"] * 4
    found = by_id(models)

    scan = {r.repo_id: r for r in scan_cache_dir(cache).repos}
    tiny = found[TINY]
    assert tiny.revision == pulled.commits[TINY][:12]
    assert tiny.path == cache / "models--mlx-community--tiny" / "snapshots" / pulled.commits[TINY]
    assert tiny.snapshots == (tiny.path,)
    assert tiny.size_bytes == scan[TINY].size_on_disk
    assert tiny.size_bytes >= (pulled.folders[TINY] / "model.safetensors").stat().st_size
    assert (tiny.architecture, tiny.model_type, tiny.quantization_bits) == ("LlamaForCausalLM", "llama", None)
    assert (tiny.loadable, tiny.reason) == (True, None)
    assert tiny.last_used is not None and started - 3600 < tiny.last_used <= time.time() + 1

    assert found[TINY_4BIT].quantization_bits == 4 and found[TINY_4BIT].loadable

    odd = found[ODD]
    assert odd.architecture == "NotARealArchForLM" and not odd.loadable
    assert odd.reason is not None and "has no notarealarch architecture" in odd.reason
    assert "mlx-lm " in odd.reason  # the installed version, named

    pytorch = found[PYTORCH]
    assert not pytorch.loadable and pytorch.reason is not None
    assert ".bin" in pytorch.reason and "safetensors" in pytorch.reason

    converted = found["mlx-community--tiny-q4"]
    assert converted.revision == pulled.commits[TINY][:12]  # its source.json's commit
    assert converted.path == state / "models" / "mlx-community--tiny-q4"
    assert converted.quantization_bits == 4 and converted.loadable and converted.last_used is not None
    assert converted.size_bytes == sum(p.stat().st_size for p in converted.path.iterdir())

    quantized = found[f"tiny-q4-{QUANTIZE_JOB}"]  # named as the job store's record says
    assert quantized.path == state / "jobs" / QUANTIZE_JOB / "output" and quantized.revision is None

    adapters = found[f"tiny-lora-{FINETUNE_JOB}"]  # no result recorded: named as job_model names it
    assert adapters.adapter and adapters.loadable
    assert adapters.model_type == "llama"  # its base model's, from the record's model_path

    assert found[f"job-{LOST_JOB}"].loadable  # no record: named by its folder


def test_loadable_reasons(tmp_path: Path) -> None:
    demo = ensure_demo_model(size="tiny")
    assert library.loadability(tmp_path) == (False, "it has no config.json")
    no_type = _variant(demo, tmp_path / "no-type", model_type="")
    assert library.loadability(no_type) == (False, "its config.json names no model_type")
    mistral = _variant(demo, tmp_path / "mistral", model_type="mistral")  # mlx-lm loads it as llama
    assert library.loadability(mistral) == (True, None)
    split = _variant(demo, tmp_path / "split")
    (split / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    loads, reason = library.loadability(split)
    assert not loads and reason == "its weights are incomplete: model-00002-of-00002.safetensors missing"
    bert = _variant(demo, tmp_path / "bert", model_type="bert", architectures=["BertModel"])
    loads, reason = library.loadability(bert)
    assert loads == (reason is None)  # served through mlx-embeddings, when it is installed
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    assert library.loadability(adapter) == (False, "it has adapter_config.json but no adapters.safetensors")

    support = library.mlx_lm_support()
    assert support is not None and "llama" in support.modules and "qwen2" in support.modules
    assert "base" not in support.modules and "cache" not in support.modules  # helpers, not architectures
    assert support.module_for("mistral") == "llama"


def test_nothing_of_mlx_is_imported(tmp_path: Path, cache: Path, state: Path) -> None:
    """find_spec of the top-level package finds mlx-lm's folder without running it."""
    script = (
        "import sys\nfrom pathlib import Path\nfrom mlxhost.catalog import library\n"
        f"models = library.list_models(Path({str(state)!r}))\n"
        "assert library.mlx_lm_support() is not None and len(models) == 8, models\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_cache_and_no_state_dir_list_nothing(tmp_path: Path) -> None:
    assert library.list_models(tmp_path / "no-state", hf_cache=tmp_path / "no-cache") == []
    assert library.list_models(None, hf_cache=tmp_path / "no-cache") == []


def test_the_table(
    pulled: Pulled, cache: Path, state: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert run_models(json=False, state_dir=str(state), url=None, action=None) == 0
    out = capsys.readouterr().out
    table, notes = out.split("\n\n")
    lines = table.splitlines()
    assert lines[0].split() == ["ID", "REV", "SIZE", "ARCH", "BITS", "LOADS", "SERVED", "LAST", "USED"]
    assert all(len(line) <= 80 for line in lines), out
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert len(rows) == 8
    assert rows[TINY][:7] == [TINY, pulled.commits[TINY][:7], "866K", "llama", "-", "yes", "-"]
    assert rows[TINY][7].endswith("s") and rows[TINY][8] == "ago"  # pulled seconds ago
    assert rows["mlx-commun…/tiny-4bit"][4] == "4"  # cut in the middle to fit: the owner and the end stay
    assert rows[ODD][3:6] == ["notareala…", "-", "no"]
    assert rows[PYTORCH][2:6] == [client.short_size(library.find(PYTORCH, state).size_bytes), "llama", "-", "no"]
    assert rows[f"tiny-q4-{QUANTIZE_JOB}"][1] == "-"  # nothing records its revision
    assert rows[f"tiny-lora-{FINETUNE_JOB}"][2:6] == ["143B", "llama", "-", "yes"]  # 100 + its config's 43
    assert f"{PYTORCH} cannot be served: its weights are only in .bin files" in notes
    assert f"{ODD} cannot be served: mlx-lm " in notes
    assert "(ids shortened to fit: `mlxhost models --json` gives them whole)" in notes
    assert "8 models, 5.1 MiB in all" in notes
    assert f"  HF cache:  {cache}\n" in notes and f"  state dir: {state}" in notes
    paths = ("  HF cache", "  state dir")  # the lines that may be wider: a path is not cut
    assert all(len(line) <= 80 for line in notes.splitlines() if not line.startswith(paths))

    monkeypatch.setenv("COLUMNS", "120")  # a wider terminal: the whole ids
    assert run_models(json=False, state_dir=str(state), url=None, action=None) == 0
    wide = capsys.readouterr().out
    assert TINY_4BIT in wide and "(ids shortened" not in wide


def test_served_and_the_fitting(tmp_path: Path) -> None:
    def model(model_id: str, path: Path, **fields: object) -> LocalModel:
        values: dict[str, object] = dict(
            id=model_id, revision="0123456789ab", path=path, size_bytes=5 * 1024**3,
            architecture="LlamaForCausalLM", model_type="llama", quantization_bits=4, loadable=True,
            reason=None, source="hf-cache", last_used=1000.0, snapshots=(path,),
        )  # fmt: skip
        return LocalModel(**(values | fields))  # type: ignore[arg-type]

    long_id = "mlx-community/Qwen2.5-Coder-32B-Instruct-abliterated-4bit-with-a-long-name"
    models = [
        model("a/ready", tmp_path / "ready"),
        model("a/idle", tmp_path / "idle"),
        model(long_id, tmp_path / "long", last_used=None, quantization_bits=None),
        model("evil\x1b[31m", tmp_path / "evil", source="state-dir", loadable=False, reason="bad\x07"),
    ]
    records = (
        ModelRecord(
            id="ready-as-path", aliases=(), path=str(tmp_path / "ready"), resident=True, default=True
        ),
        ModelRecord(id="a/idle", aliases=(), path="a/idle", resident=False, default=False),
    )
    host = HostView("http://127.0.0.1:9", 4242, records, frozenset())
    table = render_models(models, host, now=1000.0 + 3 * 86400, width=80)
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines), table
    assert lines[1].split() == ["a/ready", "0123456", "5.0G", "llama", "4", "yes", "yes", "3d", "ago"]
    assert lines[2].split()[6] == "idle"
    shortened = lines[3].split()[0]
    assert "…" in shortened and shortened.startswith("mlx-comm") and shortened.endswith("long-name")
    assert lines[3].split()[4:] == ["-", "yes", "no", "-"]
    assert "\x1b" not in table and "\x07" not in table
    assert "evil\\x1b[31m cannot be served: bad\\x07" in table
    assert "(ids shortened to fit" in table
    wide = render_models(models, host, now=2000.0, width=200)
    assert long_id in wide and "shortened" not in wide

    assert client.serving(models[0], host) == client.Serving("ready-as-path", True)
    assert client.serving(models[1], host) == client.Serving("a/idle", False)
    assert client.serving(models[2], host) is None
    listing = client.models_json(models, host)
    assert [(m["served"], m["host_model"]) for m in listing] == [
        (True, "ready-as-path"), (False, "a/idle"), (False, None), (False, None)
    ]
    # A ready worker serves it too, resident or not.
    busy = HostView("unix:/x", 1, records, frozenset({"a/idle"}))
    assert client.serving(models[1], busy) == client.Serving("a/idle", True)
    unknown = HostView("http://127.0.0.1:9", problem="it answered 401")
    assert [m["served"] for m in client.models_json(models, unknown)] == [None] * 4
    said = "SERVED is unknown: the host at http://127.0.0.1:9 cannot be asked: it answered 401"
    assert said in render_models(models, unknown, width=120)
    assert render_models([], None, hf_cache=tmp_path) == (
        f"no models on this machine; pull one: mlxhost pull OWNER/NAME\n  HF cache:  {tmp_path}"
    )
    assert [client.ago(s) for s in (0, 59, 61, 7200, 86400 * 59, 86400 * 400, 86400 * 800)] == [
        "0s ago", "59s ago", "1m ago", "2h ago", "59d ago", "13mo ago", "2y ago"
    ]
    assert [client.short_size(n) for n in (148, 999, 1000, 866 * 1024, 5.1 * 1024**3, 12 * 1024**3)] == [
        "148B", "999B", "1.0K", "866K", "5.1G", "12G"
    ]


def test_json(cache: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_models(json=True, state_dir=str(state), url=None, action=None) == 0
    listing = json.loads(capsys.readouterr().out)
    assert isinstance(listing, list) and len(listing) == 8
    tiny = next(m for m in listing if m["id"] == TINY)
    assert set(tiny) == {
        "id", "revision", "path", "size_bytes", "architecture", "model_type", "quantization_bits", "loadable",
        "reason", "source", "last_used", "adapter", "served", "host_model",
    }  # fmt: skip
    assert tiny["served"] is None and tiny["host_model"] is None  # no host running
    assert tiny["loadable"] is True and tiny["source"] == "hf-cache" and Path(tiny["path"]).is_dir()
    pytorch = next(m for m in listing if m["id"] == PYTORCH)
    assert pytorch["loadable"] is False and ".bin" in pytorch["reason"]


def test_rm_of_a_cached_repo(cache: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = cache / "models--mlx-community--tiny"
    blobs = list((folder / "blobs").iterdir())
    freed = next(r.size_on_disk for r in scan_cache_dir(cache).repos if r.repo_id == TINY)
    assert run_models(json=False, state_dir=str(state), url=None, action="rm", model=TINY) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"removed {TINY} from the Hugging Face cache: freed ") and f"({freed} bytes)" in out
    assert not folder.exists() and blobs and not any(b.exists() for b in blobs)
    assert TINY not in {r.repo_id for r in scan_cache_dir(cache).repos}
    assert TINY_4BIT in {m.id for m in library.list_models(state)}  # the others stay


def test_rm_of_a_state_dir_output(cache: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"tiny-q4-{QUANTIZE_JOB}"
    output = state / "jobs" / QUANTIZE_JOB / "output"
    removed = library.remove(name, state)
    assert removed.id == name and removed.source == "state-dir" and removed.path == output
    assert removed.freed_bytes > 0 and not output.exists()
    assert (state / "jobs" / QUANTIZE_JOB).is_dir()  # the job's log and spec stay: its history
    assert name not in {m.id for m in library.list_models(state)}
    assert run_models(json=True, state_dir=None, url=None, action="rm", model="mlx-community--tiny-q4",
                      rm_state_dir=str(state)) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["path"] == str(state / "models" / "mlx-community--tiny-q4")
    assert not (state / "models" / "mlx-community--tiny-q4").exists()


def test_rm_of_an_unknown_model(cache: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnknownLocalModel) as caught:
        library.remove("org/nothing", state)
    assert caught.value.model_id == "org/nothing" and TINY in caught.value.known
    assert "'org/nothing'" in str(caught.value) and TINY in str(caught.value)
    assert run_models(json=False, state_dir=str(state), url=None, action="rm", model="org/nothing") == 2
    err = capsys.readouterr().err
    assert "no model 'org/nothing' on this machine; the models here: " in err
    assert TINY in err and f"tiny-q4-{QUANTIZE_JOB}" in err


def test_rm_refused_while_a_host_has_it(
    cache: Path, state: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = library.find(TINY, state)
    record = ModelRecord(id="tiny", aliases=(), path=str(tiny.path), resident=True, default=True)
    monkeypatch.setattr(client, "ask_host", lambda url: HostView("http://127.0.0.1:9", 4242, (record,)))
    assert run_models(json=False, state_dir=str(state), url=None, action="rm", model=TINY) == 1
    err = capsys.readouterr().err
    assert f"{TINY} is served by the host at http://127.0.0.1:9 (pid 4242) as model tiny" in err
    assert "kill 4242" in err and tiny.path.is_dir()

    unaskable = HostView("http://127.0.0.1:9", problem="it answered 401")
    monkeypatch.setattr(client, "ask_host", lambda url: unaskable)
    assert run_models(json=False, state_dir=str(state), url=None, action="rm", model=TINY) == 1
    assert "cannot tell whether the host at http://127.0.0.1:9 serves" in capsys.readouterr().err
    assert tiny.path.is_dir()


def test_the_state_dir_defaults_to_the_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXHOST_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("MLXHOST_STATE_DIR", str(tmp_path / "from-env"))
    assert client.resolve_state_dir(None) == tmp_path / "from-env"
    assert client.resolve_state_dir(str(tmp_path / "named")) == tmp_path / "named"
    monkeypatch.delenv("MLXHOST_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert client.resolve_state_dir(None) == tmp_path / "xdg" / "mlxhost"
