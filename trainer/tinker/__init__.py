"""A local server for the open Tinker training API (`skyrl tinker serve`).

The unmodified `tinker` SDK from PyPI (0.38, protobuf bodies and results) talks to it:

- `wire`: pydantic models for the JSON request/response shapes and protobuf conversion;
- `store`: requests and futures recorded in SQLite, with in-process long-poll waiters;
- `backend`: training and sampling on local torch models (LoRA through `peft` or full weights);
- `service`: sessions, models, samplers, checkpoints and futures (no HTTP): `TinkerService`,
  a facade over one part per concept (`service_sessions`, `service_futures`, `service_runs`,
  `service_training`, `service_weights`, `service_samplers`, `service_sampling`) taking and
  returning `wire` models, with `worker` (the torch thread, batching sampling requests),
  `model_queue`, `checkpoints`, `lora`;
- `routes/`: thin FastAPI handlers by concern; `server`: the app (`create_app`);
  `cli`: the `skyrl tinker` commands.
"""
