"""`skyrl tinker serve`: run the Tinker-compatible server on local models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from skyrl_sdk.http_guard import API_KEY_ENV, DEFAULT_MAX_REQUEST_BYTES

if TYPE_CHECKING:  # service_config imports torch; the CLI imports it only to serve
    from skyrl_sdk.trainer.tinker.service_config import TokenizerIds

app = typer.Typer(help="A local server for the Tinker training API.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """A local server for the Tinker training API (the official `tinker` SDK talks to it)."""


TINY_NAME = "skyrl/tiny"
"""Name of the built-in tiny model (served when no --models file is given)."""


LOOKUP_TINY_NAME = "skyrl/lookup-tiny"
"""The `lookup` env's word-level tiny model (what `skyrl train` with `backend: tinker` trains
against our server): `model.source: lookup-tiny` with `model.pretrain_steps=0`."""

SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""Served too when its converted directory is already in the cache (`trainer.models`)."""


def lookup_tiny_dir(seed: int = 0) -> Path:
    """Build (once) the `lookup-tiny` model as a directory; its tokenizer goes to `tokenizer/`.

    The tokenizer gets a directory of its own: next to the model's Qwen2 config, transformers
    would load it as a Qwen2 tokenizer and lose the word-level vocabulary.
    """
    from skyrl_gym.cache import build_once, cache_dir

    def build(staging: Path) -> None:
        from skyrl_sdk.trainer.config import ModelConfig, ModelSource
        from skyrl_sdk.trainer.models import load_model

        # The source is named: `model.source` defaults to `tiny` (a BPE model) since issue 24.
        config = ModelConfig(source=ModelSource.LOOKUP_TINY, pretrain_steps=0)
        model, tokenizer = load_model(config, seed=seed)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging / "tokenizer")

    # v2: v1 directories built after that default changed hold the tiny model instead.
    return build_once(cache_dir() / f"lookup-tiny-v2-s{seed}", build)


def default_models() -> list:
    """The built-in tiny models (built locally), plus SmolLM2-135M-Instruct if already cached."""
    from skyrl_gym.cache import cache_dir
    from skyrl_sdk.agents.tiny import tiny_model_dir
    from skyrl_sdk.trainer.tinker.backend import BaseModelSpec

    lookup = lookup_tiny_dir()
    context = json.loads((lookup / "config.json").read_text())["max_position_embeddings"]
    specs = [
        BaseModelSpec(name=TINY_NAME, path=tiny_model_dir()),
        BaseModelSpec(
            name=LOOKUP_TINY_NAME,
            path=lookup,
            max_context_length=int(context),
            tokenizer_path=lookup / "tokenizer",
        ),
    ]
    smollm2 = cache_dir() / "smollm2-135m-instruct"
    if (smollm2 / ".complete").exists():
        specs.append(BaseModelSpec(name=SMOLLM2_NAME, path=smollm2))
    return specs


def load_models(path: Path) -> list:
    """Base models from a JSON or YAML file: a list of
    `{name, path, max_context_length?, tokenizer?}` (`tokenizer`: a separate tokenizer dir)."""
    from skyrl_sdk.trainer.tinker.backend import BaseModelSpec

    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        rows = yaml.safe_load(text)
    else:
        rows = json.loads(text)
    if isinstance(rows, dict):
        rows = rows.get("models", [])
    return [
        BaseModelSpec(
            name=r["name"],
            path=Path(r["path"]).expanduser(),
            max_context_length=int(r.get("max_context_length", 2048)),
            tokenizer_path=Path(r["tokenizer"]).expanduser() if r.get("tokenizer") else None,
        )
        for r in rows
    ]


Port = Annotated[int, typer.Option(help="TCP port.")]
Host = Annotated[
    str, typer.Option(help="Interface to bind; any non-loopback address needs --api-key.")
]
Models = Annotated[Path | None, typer.Option(help="JSON/YAML list of {name, path} base models.")]
StateDir = Annotated[
    Path | None,
    typer.Option(
        help="Where the SQLite state (futures, sessions, runs, checkpoints) and the "
        "checkpoint files are kept; reuse it to keep them across restarts "
        "(default: a fresh temporary dir)."
    ),
]
TorchThreads = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Threads torch may use (default: torch's own choice, one per core). On a "
        "small shared machine, 1 is often far faster: with contention a tiny model can "
        "take ~1 s per sample instead of ~20 ms.",
    ),
]
Autosave = Annotated[
    bool,
    typer.Option(
        help="On a clean shutdown, save each model changed since its last save_state, "
        "so that its model id continues exactly after a restart.",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_default=False,
        help="Require this key on every request but the health check: the tinker SDK "
        "sends its api_key (TINKER_API_KEY, which must start with 'tml-') as X-API-Key; "
        "'Authorization: Bearer KEY' works too. Others get 401. Required to bind a "
        "non-loopback host.",
    ),
]
MaxRequestBytes = Annotated[
    int,
    typer.Option(
        "--max-request-bytes",
        envvar="SKYRL_MAX_REQUEST_BYTES",
        min=1,
        help="Larger request bodies (also once zstd-decompressed) get 413 unread.",
    ),
]
MicroBatchTokens = Annotated[
    int,
    typer.Option(
        "--micro-batch-tokens",
        min=1,
        help="Most padded tokens in one forward pass: a larger forward_backward runs as "
        "several passes (gradients summed), so memory stays bounded whatever the request.",
    ),
]


AbandonAfter = Annotated[
    float,
    typer.Option(
        "--abandon-after",
        min=0.1,
        help="Cancel a sampling request nobody has polled for this many seconds.",
    ),
]
MaxQueuedSampleTokens = Annotated[
    int,
    typer.Option(
        "--max-queued-sample-tokens",
        min=1,
        help="Most sampling work (num_samples x max_tokens, summed over queued and running "
        "requests) the server holds; more gets 429.",
    ),
]
HeaderTimeout = Annotated[
    float,
    typer.Option(
        "--header-timeout",
        min=0.1,
        help="Seconds a connection has to send a whole request head, else it is closed.",
    ),
]
TokenizerIdsOpt = Annotated[
    str,
    typer.Option(
        "--tokenizer-ids",
        help="What get_info reports as tokenizer_id: 'path' (the tokenizer's directory here; "
        "clients on this machine load it as is), 'name' (the base model's name; clients "
        "elsewhere load it after `skyrl tinker tokenizer pull`), or 'auto': name when HOST "
        "is not loopback.",
    ),
]


@app.command()
def serve(
    port: Port = 8000,
    host: Host = "127.0.0.1",
    models: Models = None,
    state_dir: StateDir = None,
    torch_threads: TorchThreads = None,
    autosave: Autosave = True,
    api_key: ApiKey = None,
    max_request_bytes: MaxRequestBytes = DEFAULT_MAX_REQUEST_BYTES,
    micro_batch_tokens: MicroBatchTokens = 4096,  # backend.DEFAULT_MICRO_BATCH_TOKENS (torch-free here)
    abandon_after: AbandonAfter = 60.0,
    max_queued_sample_tokens: MaxQueuedSampleTokens = 16 * 65_536,
    header_timeout: HeaderTimeout = 10.0,
    tokenizer_ids: TokenizerIdsOpt = "auto",
) -> None:
    """Serve the Tinker API; point the SDK at it with `TINKER_BASE_URL=http://HOST:PORT`."""
    from skyrl_sdk.http_guard import InsecureBindError, check_bind

    try:
        check_bind(host, api_key)  # before any model is built: refuse at once
    except InsecureBindError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    reported = _tokenizer_ids(tokenizer_ids, host)
    if api_key and not api_key.startswith(("tml-", "eyJ")):
        typer.echo(
            "warning: the tinker SDK only sends keys that start with 'tml-'; "
            "with this key only raw HTTP clients can connect",
            err=True,
        )

    import uvicorn

    from skyrl_sdk.trainer.tinker.server import ServerConfig, create_app

    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    specs = load_models(models) if models else default_models()
    config = ServerConfig(
        models=specs,
        autosave_on_shutdown=autosave,
        api_key=api_key or None,
        max_request_bytes=max_request_bytes,
        micro_batch_tokens=micro_batch_tokens,
        abandon_after_s=abandon_after,
        max_queued_sample_tokens=max_queued_sample_tokens,
        header_timeout_s=header_timeout,
        tokenizer_ids=reported,
    )
    if state_dir is not None:
        config.state_dir = state_dir
    threads = "" if torch_threads is None else f" with {torch_threads} torch thread(s)"
    auth = "API key required" if api_key else "no API key"
    typer.echo(f"serving {[s.name for s in specs]} on http://{host}:{port}{threads} ({auth})")
    from skyrl_sdk.trainer.tinker.server import uvicorn_http

    uvicorn.run(
        create_app(config), host=host, port=port, log_level="warning", http=uvicorn_http(config)
    )


def _tokenizer_ids(choice: str, host: str) -> TokenizerIds:
    from skyrl_sdk.http_guard import is_loopback
    from skyrl_sdk.trainer.tinker.service_config import TokenizerIds

    if choice == "auto":
        return TokenizerIds.PATH if is_loopback(host) else TokenizerIds.NAME
    try:
        return TokenizerIds(choice)
    except ValueError:
        raise typer.BadParameter(f"--tokenizer-ids: auto, path or name, not {choice!r}") from None


tokenizer_app = typer.Typer(help="A Tinker server's tokenizers on this machine.")
app.add_typer(tokenizer_app, name="tokenizer")


@tokenizer_app.command("pull")
def tokenizer_pull(
    base_url: Annotated[str, typer.Option(envvar="TINKER_BASE_URL", help="The server's URL.")],
    api_key: Annotated[
        str | None, typer.Option(envvar="TINKER_API_KEY", show_default=False, help="Its API key.")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="One base model (default: every one it serves).")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Hub cache to write (default: $HF_HOME/hub).")
    ] = None,
) -> None:
    """Store the server's tokenizers in the local Hugging Face cache under their base model
    names, so `AutoTokenizer.from_pretrained(base_model)` (the tinker SDK's get_tokenizer,
    tinker-cookbook's) loads them here, offline too."""
    from skyrl_sdk.trainer.tinker.tokenizer_pull import PullError, pull

    try:
        pulled = pull(base_url, api_key, model, cache_dir)
    except PullError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    for p in pulled:
        typer.echo(f"{p.base_model}: {', '.join(p.files)} -> {p.snapshot}")
