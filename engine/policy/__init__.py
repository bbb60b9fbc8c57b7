"""The fork's scheduling policy, one implementation shared by the simulator, the vLLM plugin and
the twin: the compute-share controller and the leftover decode pass's preemption rule.
"""
