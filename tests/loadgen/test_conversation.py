"""The one conversation builder: a session's system prompt (shared when asked), then turns that
extend the previous prompt and reply; as chat messages or as the simulator's words."""

from __future__ import annotations

from stallkit.loadgen.agent import AgentMachine, Send
from stallkit.loadgen.config import LoadConfig
from stallkit.loadgen.conversation import ChatConversation, WordConversation, system_text

CFG = LoadConfig(agents=3, min_context=2000, max_context=8000, system_prompt_tokens=100)


def _first_send(cfg: LoadConfig, agent: int) -> Send:
    machine = AgentMachine(cfg, agent)
    machine.start()
    action = machine.waited()
    assert isinstance(action, Send)
    return action


def _openings(cfg: LoadConfig) -> list[list[str]]:
    return [WordConversation(cfg, a).prompt(_first_send(cfg, a))[:100] for a in range(3)]


def test_agents_share_the_system_prompt_only_when_the_load_says_so() -> None:
    distinct = _openings(CFG)
    assert len({tuple(p) for p in distinct}) == 3
    shared_cfg = CFG.model_copy(update={"shared_system_prompt": True})
    shared = _openings(shared_cfg)
    assert shared[0] == shared[1] == shared[2]
    # the HTTP agents' system message follows the same rule
    texts = {system_text(shared_cfg, _first_send(shared_cfg, a).plan) for a in range(3)}
    assert len(texts) == 1
    chat = ChatConversation.start(shared_cfg, _first_send(shared_cfg, 0).plan)
    assert chat.history == [{"role": "system", "content": texts.pop()}]


def test_a_turn_extends_the_last_prompt_and_reply_to_the_planned_size() -> None:
    machine = AgentMachine(CFG, 0)
    conversation = WordConversation(CFG, 0)
    machine.start()
    first = machine.waited()
    assert isinstance(first, Send)
    prompt = list(conversation.prompt(first))
    assert len(prompt) == first.plan.target_prompt_tokens and conversation.continues(first) is None
    conversation.answered("r0", ["reply"] * first.plan.max_tokens)
    machine.answered(True)
    second = machine.waited()
    assert isinstance(second, Send) and second.plan.turn == 1
    again = conversation.prompt(second)
    assert len(again) == second.plan.target_prompt_tokens
    assert again[: len(prompt)] == prompt and conversation.continues(second) == "r0"
    # deterministic: the same plans give the same words
    assert WordConversation(CFG, 0).prompt(_first_send(CFG, 0)) == prompt
