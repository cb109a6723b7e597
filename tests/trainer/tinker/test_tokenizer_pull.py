"""A client on another machine loads the server's tokenizers: `skyrl tinker tokenizer pull`
stores them in a fresh Hugging Face cache, and then, offline, the `tinker` SDK's
`TrainingClient.get_tokenizer()`, `SamplingClient.get_tokenizer()` and a plain
`AutoTokenizer.from_pretrained(base_model)` (what tinker-cookbook calls) load them and
tokenize exactly as the server does.

"Another machine" is a subprocess whose HF cache holds nothing but what the pull wrote, with
the server reporting base model names as `tokenizer_id` (as `skyrl tinker serve` does on a
non-loopback host), so no path on the server's side is ever read by the client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.trainer.tinker.conftest import API_KEY, AUTH

pytest.importorskip("tinker")

TEXTS = ["hello world", "the cat sat on the mat", "count: 1 2 3", " Ünïcode  spaces\n\tend"]
"""What both sides tokenize."""

CLIENT = """
import json, sys, warnings
warnings.simplefilter("ignore", FutureWarning)  # get_server_capabilities' deprecation
import tinker
from transformers import AutoTokenizer

base_url, key, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
CHAT = [{"role": "user", "content": texts[0]}]
try:  # tinker-cookbook's loader, where it is installed (it is no dependency of ours)
    from tinker_cookbook import tokenizer_utils as cookbook
except ImportError:
    cookbook = None
service = tinker.ServiceClient(base_url=base_url, api_key=key)
names = [m.model_name for m in service.get_server_capabilities().supported_models]
out = {}
for name in names:
    trainer = service.create_lora_training_client(name, rank=4).result()
    sampler = service.create_sampling_client(base_model=name).result()
    toks = {
        "training": trainer.get_tokenizer(),
        "sampling": sampler.get_tokenizer(),
        "auto": AutoTokenizer.from_pretrained(name),
    }
    if cookbook is not None:
        toks["cookbook"] = cookbook.get_tokenizer(name)
    out[name] = {
        "tokenizer_id": trainer.get_info().model_data.tokenizer_id,
        "loaded_from": {k: t.name_or_path for k, t in toks.items()},
        "ids": {k: [t.encode(x) for x in texts] for k, t in toks.items()},
        "chat": {k: t.apply_chat_template(CHAT, tokenize=False) for k, t in toks.items()},
    }
print(json.dumps(out))
"""
"""The remote client: every base model through the SDK's two get_tokenizer()s and the
cookbook's call."""


@pytest.fixture(scope="module")
def named_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict]]:
    """A server reporting base model names as `tokenizer_id`; its URL and specs by name."""
    from skyrl_sdk.trainer.tinker.cli import default_models
    from skyrl_sdk.trainer.tinker.server import ServerConfig, ServerThread
    from skyrl_sdk.trainer.tinker.service_config import TokenizerIds

    os.environ["TINKER_TELEMETRY"] = "0"
    models = default_models()
    config = ServerConfig(
        models=models,
        state_dir=tmp_path_factory.mktemp("tinker-named"),
        poll_timeout_s=20,
        api_key=API_KEY,
        tokenizer_ids=TokenizerIds.NAME,
    )
    with ServerThread(config) as server:
        yield server.base_url, {s.name: s for s in models}


def _env(hf_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    return env | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0"}


def _pull(base_url: str, hf_home: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "tokenizer", "pull"]
    cmd += ["--base-url", base_url, "--api-key", API_KEY, *extra]
    return subprocess.run(cmd, env=_env(hf_home), capture_output=True, text=True, timeout=120)


def _client(base_url: str, hf_home: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", CLIENT, base_url, API_KEY, json.dumps(TEXTS)]
    return subprocess.run(cmd, env=_env(hf_home), capture_output=True, text=True, timeout=300)


def test_pulled_tokenizers_load_offline_and_match_the_server(
    named_server: tuple[str, dict], tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    base_url, specs = named_server
    pulled = _pull(base_url, tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    client = _client(base_url, tmp_path)
    assert client.returncode == 0, client.stderr[-3000:]
    report = json.loads(client.stdout.strip().splitlines()[-1])
    assert set(report) == set(specs)
    for name, spec in specs.items():
        served = AutoTokenizer.from_pretrained(spec.tokenizer_dir)
        expected = [served.encode(t) for t in TEXTS]
        got = report[name]
        assert got["tokenizer_id"] == name
        loaders = set(got["ids"])
        assert loaders >= {"training", "sampling", "auto"}
        assert got["ids"] == dict.fromkeys(loaders, expected), name
        chat = served.apply_chat_template([{"role": "user", "content": TEXTS[0]}], tokenize=False)
        assert got["chat"] == dict.fromkeys(loaders, chat), name
        # Loaded by name from the pulled cache, not from the server's directory.
        assert set(got["loaded_from"].values()) == {name}
        repo = tmp_path / "hub" / ("models--" + name.replace("/", "--"))
        snapshot = repo / "snapshots" / (repo / "refs" / "main").read_text()
        assert (snapshot / "tokenizer_config.json").is_file()
        assert not list(snapshot.glob("*.safetensors"))  # weights stay on the server


def test_without_the_pull_the_client_cannot_load_the_tokenizer(
    named_server: tuple[str, dict], tmp_path: Path
) -> None:
    """The control: the same client on an empty cache fails, so the pull is what works."""
    base_url, _ = named_server
    client = _client(base_url, tmp_path)
    assert client.returncode != 0
    assert "OSError" in client.stderr and "cached files" in client.stderr


def test_pull_of_one_model(named_server: tuple[str, dict], tmp_path: Path) -> None:
    base_url, specs = named_server
    pulled = _pull(base_url, tmp_path, "--model", "skyrl/tiny")
    assert pulled.returncode == 0, pulled.stderr
    assert [p.name for p in (tmp_path / "hub").iterdir()] == ["models--skyrl--tiny"]


def test_pull_reports_a_refusal(named_server: tuple[str, dict], tmp_path: Path) -> None:
    base_url, _ = named_server
    pulled = _pull(base_url, tmp_path, "--model", "nobody/nothing")
    assert pulled.returncode == 1
    assert "404" in pulled.stderr and "unknown base model" in pulled.stderr
    assert not (tmp_path / "hub" / "models--nobody--nothing" / "refs").exists()


def test_the_route_needs_the_key_and_a_served_model(named_server: tuple[str, dict]) -> None:
    base_url, specs = named_server
    url = base_url + "/api/v1/tokenizer"
    model = {"base_model": "skyrl/tiny"}
    assert httpx.get(url, params=model, headers={"X-API-Key": "tml-wrong"}).status_code == 401
    assert httpx.get(url, params=model).status_code == 401
    assert httpx.get(url + "/file", params=model | {"name": "tokenizer.json"}).status_code == 401
    unknown = httpx.get(url, params={"base_model": "nobody/nothing"}, headers=AUTH)
    assert unknown.status_code == 404 and "unknown base model" in unknown.json()["error"]
    manifest = httpx.get(url, params=model, headers=AUTH).json()
    assert manifest["base_model"] == "skyrl/tiny" and len(manifest["revision"]) == 40
    names = [f["name"] for f in manifest["files"]]
    assert "tokenizer.json" in names and not any(n.endswith(".safetensors") for n in names)
    sent = httpx.get(url + "/file", params=model | {"name": "tokenizer.json"}, headers=AUTH)
    on_disk = (specs["skyrl/tiny"].tokenizer_dir / "tokenizer.json").read_bytes()
    assert sent.status_code == 200 and sent.content == on_disk


@pytest.mark.parametrize(
    "name", ["model.safetensors", "../tokenizer.json", "/etc/passwd", "%2e%2e/config.json", ""]
)
def test_the_route_serves_only_tokenizer_files(named_server: tuple[str, dict], name: str) -> None:
    base_url, _ = named_server
    reply = httpx.get(
        base_url + "/api/v1/tokenizer/file",
        params={"base_model": "skyrl/tiny", "name": name},
        headers=AUTH,
    )
    assert reply.status_code == 404, reply.text


def test_serve_reports_names_when_clients_are_elsewhere() -> None:
    from skyrl_sdk.trainer.tinker.cli import _tokenizer_ids
    from skyrl_sdk.trainer.tinker.service_config import TokenizerIds

    assert _tokenizer_ids("auto", "127.0.0.1") is TokenizerIds.PATH
    assert _tokenizer_ids("auto", "0.0.0.0") is TokenizerIds.NAME
    assert _tokenizer_ids("name", "127.0.0.1") is TokenizerIds.NAME
    assert _tokenizer_ids("path", "0.0.0.0") is TokenizerIds.PATH


def test_a_name_that_is_no_repo_id_is_not_stored(tmp_path: Path) -> None:
    from skyrl_sdk.trainer.tinker.tokenizer_pull import PullError, repo_dir

    assert repo_dir(tmp_path, "org/name") == tmp_path / "models--org--name"
    for bad in ["../evil", "a/b/c", "/abs", "org/..", "a\\b", ""]:
        with pytest.raises(PullError):
            repo_dir(tmp_path, bad)


def test_llama3_is_stored_where_the_sdk_looks_too() -> None:
    from skyrl_sdk.trainer.tinker.tokenizer_pull import LLAMA3_TOKENIZER, sdk_names

    assert sdk_names("meta-llama/Llama-3.2-1B") == ("meta-llama/Llama-3.2-1B", LLAMA3_TOKENIZER)
    assert sdk_names("Qwen/Qwen3-0.6B") == ("Qwen/Qwen3-0.6B",)
