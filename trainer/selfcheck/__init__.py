"""Self-checks of the trainer on real hardware, run by hand or by `make test-gpu`, never by a
training run.

- `gpu`: `python -m skyrl_sdk.trainer.selfcheck.gpu` (`make test-gpu`): the GPU path end to
  end in one process (`--device cpu` runs it on the CPU, as the suite does).
- `distributed`: `torchrun --nproc_per_node 2 -m skyrl_sdk.trainer.selfcheck.distributed`: a
  short data-parallel training (FSDP2 or DeepSpeed) and its checkpoint round trip.
"""
