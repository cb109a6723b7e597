"""The trainer's backends, each building a run's parts once (`base.Parts`) for the one RL loop
(`trainer.loop.TrainingLoop`):

- `local`: a torch `Learner` in this process; a `LocalEngine` thread or `VLLMEngine`.
- `ray` (`--ray`): learner and engine actors (`RayLearner` or `RayDataParallelLearner`,
  `RayEngine`), optionally env actors.
- `tinker` (`backend: tinker`): `TinkerLearner` and `TinkerEngine` on a Tinker endpoint.

Each module is imported only when its backend is chosen (Ray and the `tinker` SDK are optional).
"""
