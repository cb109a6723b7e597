"""Config: YAML + overrides, errors that name the bad field."""

import pytest

from skyrl_sdk.trainer.config import (
    ConfigError,
    PolicyLoss,
    build_config,
    load_config,
    parse_overrides,
)


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  steps: 7\nalgorithm:\n  loss: importance_sampling\n")
    cfg = load_config(path, ["trainer.max_staleness=2", "model.lora.target_modules=[q_proj]"])
    assert cfg.trainer.steps == 7
    assert cfg.trainer.max_staleness == 2
    assert cfg.algorithm.loss is PolicyLoss.IMPORTANCE_SAMPLING
    assert cfg.model.lora.target_modules == ("q_proj",)
    # The dump loads back to the same config.
    again = tmp_path / "again.yaml"
    again.write_text(cfg.to_yaml())
    assert load_config(again) == cfg


def test_algorithm_strings_parse_into_the_losses_enums(tmp_path):
    from skyrl_sdk.trainer import losses

    path = tmp_path / "c.yaml"
    path.write_text("algorithm:\n  kl_estimator: k1\n  reduction: sequence_mean\n")
    cfg = load_config(path)
    # one enum per concept: the config's values are the loss module's own members
    assert cfg.algorithm.kl_estimator is losses.KLEstimator.K1
    assert cfg.algorithm.reduction is losses.Reduction.SEQUENCE_MEAN
    assert build_config({}, []).algorithm.kl_estimator is losses.KLEstimator.K3
    assert "kl_estimator: k1" in cfg.to_yaml()
    again = tmp_path / "again.yaml"
    again.write_text(cfg.to_yaml())
    assert load_config(again) == cfg


@pytest.mark.parametrize(
    "name", ["ppo", "importance_sampling", "cispo", "dro", "gspo", "cross_entropy"]
)
def test_every_catalogue_loss_is_an_algorithm_loss(tmp_path, name):
    from skyrl_sdk.trainer import losses

    path = tmp_path / "c.yaml"
    path.write_text(f"algorithm:\n  loss: {name}\n  dro_beta: 0.1\n")
    cfg = load_config(path)
    assert cfg.algorithm.loss is PolicyLoss(name) is losses.loss_spec(name).name
    assert f"loss: {name}" in cfg.to_yaml()
    again = tmp_path / "again.yaml"
    again.write_text(cfg.to_yaml())
    assert load_config(again) == cfg


def test_the_default_loss_is_still_ppo():
    assert build_config({}, []).algorithm.loss is PolicyLoss.PPO


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("trainer.max_stalenes=1", "trainer.max_stalenes: unknown field"),
        ("trainer.max_staleness=-1", "trainer.max_staleness"),
        ("algorithm.loss=nope", "algorithm.loss"),
        ("algorithm.reduction=constant", "algorithm.normalizer"),
        ("algorithm.kl_estimator=k2", "algorithm.kl_estimator"),
        ("algorithm.loss=dro", "algorithm.dro_beta is required"),
        ("algorithm.dro_beta=0", "algorithm.dro_beta"),
        ("model.source=pretrained", "model.path"),
    ],
)
def test_errors_name_the_field(override, names):
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        build_config({}, [override])


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match=r"key\.path=value"):
        parse_overrides(["steps"])
    assert parse_overrides(["a.b=1", "a.c=x", "d=true"]) == {"a": {"b": 1, "c": "x"}, "d": True}


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_env_pass_env_reaches_make_kwargs():
    """`env.pass_env` (Harbor `${VAR}` templating allowlist) is passed to `make` as a kwarg."""
    from skyrl_sdk.trainer.config import ConfigError, load_config

    cfg = load_config(None, ["env.id=harbor", "env.pass_env=[OPENAI_API_KEY]"])
    assert cfg.env.pass_env == ["OPENAI_API_KEY"]
    assert cfg.env.kwargs["pass_env"] == ["OPENAI_API_KEY"]
    assert "pass_env" not in load_config(None, []).env.kwargs
    with pytest.raises(ConfigError, match="not an environment variable name"):
        load_config(None, ["env.pass_env=['A B']"])
