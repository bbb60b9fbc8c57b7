"""The agent's state machine: start wait, sends, retries after the pause, thinks, stops."""

from __future__ import annotations

from stallkit.loadgen.agent import AgentMachine, Done, Send, Wait
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.workload import plan_agent, start_offset_s

CFG = LoadConfig(agents=3, seed=5, max_retries=1, max_turns=3, stagger_s=2.0)


def test_waits_for_its_start_then_sends_the_planned_turns() -> None:
    machine = AgentMachine(CFG, 2)
    first = machine.start()
    assert first == Wait(start_offset_s(CFG, 2), "start")
    plans = plan_agent(CFG, 2)
    action = machine.waited()
    for _ in range(3):
        plan = next(plans)
        assert action == Send(plan, 0)
        after = machine.answered(True)
        if isinstance(after, Done):
            break
        assert after == Wait(plan.think_s, "think")
        action = machine.waited()
    assert isinstance(after, Done)  # max_turns played


def test_a_failed_turn_is_retried_after_its_pause_then_dropped() -> None:
    machine = AgentMachine(CFG.model_copy(update={"max_turns": None}), 0)
    machine.start()
    send = machine.waited()
    assert isinstance(send, Send)
    retry_wait = machine.answered(False)
    assert retry_wait == Wait(send.plan.think_s, "retry")
    retry = machine.waited()
    assert retry == Send(send.plan, 1)
    moved_on = machine.answered(False)  # the retry failed too: the agent moves on
    assert moved_on == Wait(send.plan.think_s, "think")
    following = machine.waited()
    assert isinstance(following, Send) and following.attempt == 0
    assert following.plan != send.plan


def test_no_retries_moves_on_at_once() -> None:
    machine = AgentMachine(CFG.model_copy(update={"max_retries": 0, "max_turns": 1}), 1)
    machine.start()
    machine.waited()
    assert isinstance(machine.answered(False), Done)
