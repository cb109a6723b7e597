"""Text-to-SQL evaluation: score predictions or a policy by execution accuracy
(`skyrl text2sql eval`), with the metrics of `skyrl_gym.envs.sql.metrics`."""
