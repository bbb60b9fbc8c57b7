"""The compute-share controller: weighted charging, the one-charge clamp, strict selection."""

from __future__ import annotations

import pytest

from stallkit.engine.policy.controller import ComputeShareController


def test_equal_vruntimes_pick_decode_and_strictly_behind_picks_prefill() -> None:
    ctl = ComputeShareController(0.4)
    assert ctl.select(True, True) == ("decode", True)
    ctl.charge("decode", 0.06)
    assert ctl.vruntime_decode == pytest.approx(0.1)
    assert ctl.select(True, True) == ("prefill", True)


def test_charges_are_weighted_by_share() -> None:
    ctl = ComputeShareController(0.4)
    ctl.charge("prefill", 0.2)
    assert ctl.vruntime_prefill == pytest.approx(0.5)
    assert ctl.vruntime_decode == 0.0  # trails by one charge (0.5) at most: still 0
    ctl.charge("decode", 0.3)
    assert ctl.vruntime_decode == pytest.approx(0.5)


def test_trailing_class_is_pulled_up_to_one_charge_behind() -> None:
    ctl = ComputeShareController(0.4)
    for _ in range(10):
        ctl.charge("decode", 0.6)  # each charge is 1.0
    assert ctl.vruntime_decode == pytest.approx(10.0)
    # prefill never ran, yet trails by exactly one charge, not by ten
    assert ctl.vruntime_prefill == pytest.approx(9.0)
    ctl.charge("prefill", 0.4)  # a charge of 1.0 brings it level
    assert ctl.vruntime_prefill == pytest.approx(10.0)
    assert ctl.select(True, True) == ("decode", True)


def test_one_runnable_class_runs_uncontended_and_resets() -> None:
    ctl = ComputeShareController(0.4)
    ctl.charge("decode", 0.6)
    assert ctl.select(False, True) == ("prefill", False)
    assert (ctl.vruntime_prefill, ctl.vruntime_decode) == (0.0, 0.0)
    assert ctl.select(True, False) == ("decode", False)
    assert ctl.select(False, False) == ("none", False)


def test_share_zero_turns_the_controller_off() -> None:
    ctl = ComputeShareController(0.0)
    assert ctl.select(True, True) == ("none", False)
