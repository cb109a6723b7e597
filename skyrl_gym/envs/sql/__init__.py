"""The `sql` / `text2sql` env: SkyRL-SQL's multi-turn Text-to-SQL protocol and reward, dataset
loaders (Spider, BIRD, SkyRL-SQL), execution-accuracy metrics and the bundled benchmark."""
