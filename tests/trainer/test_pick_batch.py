"""`pick_batch`: the learner's batch choice keeps every group within `max_staleness`."""

import random

import pytest

from skyrl_sdk.trainer.batch import pick_batch


def test_waits_rather_than_strand_two_old_groups():
    # s=2, one group per step: g0 and g2 (admitted at 0) still run at version 1, g3 is done.
    # Taking g3 now would leave two groups due at version 2 and only one batch to hold them.
    assert pick_batch({3: 1}, [0, 0], version=1, groups_per_step=1, max_staleness=2) is None
    assert pick_batch({3: 1, 2: 0}, [0], version=1, groups_per_step=1, max_staleness=2) == [2]


def test_synchronous_needs_the_whole_batch():
    assert pick_batch({0: 0, 1: 0}, [0], version=0, groups_per_step=3, max_staleness=0) is None
    assert pick_batch({0: 0, 1: 0, 2: 0}, [], 0, 3, 0) == [0, 1, 2]


def test_oldest_first_then_index():
    assert pick_batch({5: 2, 4: 1, 7: 1, 6: 3}, [], 3, 2, 4) == [4, 7]


@pytest.mark.parametrize("staleness", [0, 1, 2, 4])
@pytest.mark.parametrize("groups_per_step", [1, 3])
def test_simulated_runs_never_exceed_the_bound(staleness, groups_per_step):
    """Gate admission + random heavy-tailed finishing order + pick_batch, many seeds."""
    for seed in range(30):
        rng = random.Random(seed)
        version, admitted, clock = 0, 0, 0.0
        running: dict[int, tuple[float, int]] = {}  # index -> (finish time, admitted version)
        finished: dict[int, int] = {}
        worst = 0
        while version < 25:
            while admitted < (version + staleness + 1) * groups_per_step:
                running[admitted] = (clock + rng.paretovariate(1.1), version)
                admitted += 1
            chosen = pick_batch(
                finished, [v for _, v in running.values()], version, groups_per_step, staleness
            )
            if chosen is None:
                assert running, "waiting with nothing running would deadlock"
                index = min(running, key=lambda i: running[i][0])
                clock, v = running.pop(index)
                finished[index] = v
                continue
            worst = max(worst, *(version - finished.pop(i) for i in chosen))
            version += 1
        assert worst <= staleness
        if staleness:
            assert worst >= 1  # it still trains on stale groups (runs ahead)
