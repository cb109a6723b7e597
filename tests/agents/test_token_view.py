"""`TokenView`: the policy's view of an episode's ids is an immutable sequence."""

from __future__ import annotations

import pytest

from skyrl_sdk.agents.token_view import TokenView


def test_token_view_is_an_immutable_sequence_of_prefix_and_tail() -> None:
    tail = [4, 5]
    view = TokenView((1, 2, 3), tail, 5)
    tail.extend([6, 7])  # later turns append; the view does not change
    assert len(view) == 5 and list(view) == [1, 2, 3, 4, 5] and tuple(view) == (1, 2, 3, 4, 5)
    assert [view[i] for i in range(5)] == [1, 2, 3, 4, 5] and view[-1] == 5 and view[-5] == 1
    for bad in (5, -6):
        with pytest.raises(IndexError):
            view[bad]
    assert view[1:4] == (2, 3, 4) and view[::-2] == (5, 3, 1)
    assert view == (1, 2, 3, 4, 5) and view == [1, 2, 3, 4, 5] and view != (1, 2, 3, 4, 5, 6)
    assert hash(view) == hash((1, 2, 3, 4, 5)) and 4 in view and view.index(4) == 3
    assert TokenView((1,), [], 1) == TokenView((1,), [9], 1)
