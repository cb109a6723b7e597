"""LoRA settings: the trainer's `LoRAConfig` is the one type; records saved by older servers
(the SDK's keys: rank, train_attn, train_mlp, train_unembed, seed) still load."""

from __future__ import annotations

import json

import pytest

from skyrl_sdk.trainer.config import LoRAConfig
from skyrl_sdk.trainer.tinker import lora
from tests.trainer.tinker.conftest import API_KEY, TinkerServer

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

OLD = {"rank": 4, "train_attn": True, "train_mlp": False, "train_unembed": False, "seed": 3}
"""How a run's and a checkpoint's LoRA settings were stored before `LoRAConfig` was the type."""


def test_sdk_settings_become_the_trainers_lora_config() -> None:
    settings = lora.from_request(OLD)
    assert settings == LoRAConfig(
        enabled=True, r=4, alpha=4.0, target_modules=lora.ATTN, seed=3, dropout=0.0
    )
    assert lora.read(lora.to_record(settings)) == settings
    assert lora.read(OLD) == settings  # the old shape reads as the same settings
    assert lora.sdk_fields(settings) == {
        "lora_rank": 4,
        "train_attn": True,
        "train_mlp": False,
        "train_unembed": False,
    }
    with pytest.raises(ValueError, match="trains nothing"):
        lora.from_request(
            {"rank": 4, "train_attn": False, "train_mlp": False, "train_unembed": False}
        )
    with pytest.raises(ValueError, match="rank"):
        lora.from_request({"rank": 0})


def test_old_shaped_checkpoint_and_run_records_load(tinker_server: TinkerServer) -> None:
    """A checkpoint and a run registered by the old code (SDK-keyed `lora`) load and train."""
    service = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY)
    rest = tinker.RestClient(base_url=tinker_server.base_url, api_key=API_KEY)
    trainer = service.create_lora_training_client(
        tinker_server.base_model, rank=4, seed=3, train_mlp=False, train_unembed=False
    ).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7, 8]),
        loss_fn_inputs={"target_tokens": [6, 7, 8, 9], "weights": [1.0] * 4},
    )
    trainer.forward_backward([datum], "cross_entropy").result()
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    path = trainer.save_state("old-shape").result().path
    expected = trainer.forward([datum], "cross_entropy").result().metrics["loss:sum"]

    # Rewrite both records the way the old server wrote them.
    svc = tinker_server.service
    _, directory = svc.files.resolve(path)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["lora"]["r"] == 4  # written in the new shape
    meta["lora"] = OLD
    (directory / "meta.json").write_text(json.dumps(meta))
    svc.registry.runs.update(trainer.model_id, lora=OLD)

    run = rest.get_training_run(trainer.model_id).result()
    assert (run.is_lora, run.lora_rank) == (True, 4)
    info = rest.get_weights_info_by_tinker_path(path).result()
    assert (info.lora_rank, info.train_attn, info.train_mlp, info.train_unembed) == (
        4,
        True,
        False,
        False,
    )
    restored = service.create_training_client_from_state_with_optimizer(path).result()
    got = restored.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    assert got == pytest.approx(expected, rel=1e-5)
    sampler = service.create_sampling_client(model_path=path)
    sampler = sampler.result() if hasattr(sampler, "result") else sampler
    params = types.SamplingParams(max_tokens=2, stop=[], seed=0)
    out = sampler.sample(types.ModelInput.from_ints([5, 6]), 1, params).result()
    assert len(out.sequences[0].tokens) == 2
