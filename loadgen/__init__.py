"""The agents: workload model, prompt sizing, streaming client and turn records."""
