"""`skyrl search index | serve | query`: build, serve and try BM25 indexes.

Heavy imports (tantivy, fastapi, uvicorn) happen inside the commands, so `skyrl --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from skyrl_sdk.http_guard import API_KEY_ENV, DEFAULT_MAX_REQUEST_BYTES

app = typer.Typer(help="Build, serve and query BM25 search indexes.", no_args_is_help=True)
console = Console()

BUNDLED = "bundled"


def _index_dir(index: str) -> Path:
    if index == BUNDLED:
        from skyrl_gym.envs.search.env import bundled_index_dir

        return bundled_index_dir()
    return Path(index)


def _die(message: str) -> None:
    console.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(2)


@app.command("index")
def index_cmd(
    corpus: Path = typer.Argument(..., help="JSONL corpus: one {id, title, text} per line."),
    out: Path = typer.Option(..., "--out", help="Directory to write the index to."),
    overwrite: bool = typer.Option(False, help="Replace an existing index at --out."),
    threads: int = typer.Option(1, help="Indexing threads (1 = reproducible segment layout)."),
) -> None:
    """Build a BM25 index of a corpus on disk."""
    from skyrl_sdk.tools.search import CorpusError, SearchIndexError, build_index

    try:
        manifest = build_index(corpus, out, overwrite=overwrite, num_threads=threads)
    except (CorpusError, SearchIndexError) as e:
        _die(str(e))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    console.print(
        f"indexed {manifest.documents} documents in {manifest.build_s:.2f}s -> {out} "
        f"({size / 1e6:.2f} MB, {manifest.backend} {manifest.backend_version})"
    )


@app.command("serve")
def serve_cmd(
    index: str = typer.Argument(..., help=f"Index directory, or '{BUNDLED}' for the bundled one."),
    port: int = typer.Option(8000, help="TCP port."),
    host: str = typer.Option(
        "127.0.0.1", help="Interface to bind (0.0.0.0 for all: needs --api-key)."
    ),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar=API_KEY_ENV,
        show_default=False,
        help="Require this key on every request but GET /health, as 'Authorization: Bearer "
        "KEY' (HttpRetriever's api_key, $SKYRL_API_KEY) or X-API-Key; others get 401. "
        "Required to bind a non-loopback host.",
    ),
    max_request_bytes: int = typer.Option(
        DEFAULT_MAX_REQUEST_BYTES,
        "--max-request-bytes",
        envvar="SKYRL_MAX_REQUEST_BYTES",
        min=1,
        help="Larger request bodies get 413 without being read.",
    ),
) -> None:
    """Serve an index over the Search-R1 retrieval API (POST /retrieve)."""
    from skyrl_sdk.http_guard import InsecureBindError, check_bind
    from skyrl_sdk.tools.search import SearchIndexError
    from skyrl_sdk.tools.search.server import serve_index

    try:
        check_bind(host, api_key)
    except InsecureBindError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        index_dir = _index_dir(index)
        auth = "API key required" if api_key else "no API key"
        console.print(f"serving {index_dir} at http://{host}:{port}/retrieve ({auth})")
        serve_index(
            index_dir,
            host=host,
            port=port,
            log_level=log_level,
            api_key=api_key or None,
            max_request_bytes=max_request_bytes,
        )
    except SearchIndexError as e:
        _die(str(e))


@app.command("query")
def query_cmd(
    source: str = typer.Argument(
        ..., help=f"Index directory, '{BUNDLED}', or a retrieval server URL (http://...)."
    ),
    query: str = typer.Argument(..., help="The query text."),
    topk: int = typer.Option(3, help="Passages to return."),
) -> None:
    """Run one query and print the passages."""
    from skyrl_sdk.tools.search import BM25Index, HttpRetriever, RetrievalError, SearchIndexError

    try:
        if source.startswith(("http://", "https://")):
            retriever = HttpRetriever(source)
        else:
            retriever = BM25Index(_index_dir(source))
        try:
            passages = retriever.retrieve([query], topk)[0]
        finally:
            retriever.close()
    except (RetrievalError, SearchIndexError, ValueError) as e:
        _die(str(e))
    if not passages:
        console.print("no passages")
    for i, p in enumerate(passages, 1):
        console.print(f"[bold]{i}. {escape(p.title)}[/]  [dim]{p.id}  score {p.score:.3f}[/]")
        console.print(escape(p.text[:400]))
