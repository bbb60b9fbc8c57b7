"""The stall corpus: known stalls (the fork's livelock, upstream vLLM and LMCache reports), each a
kit plus the engine that stalls and the engine that does not, replayed on the virtual clock and
checked like tests (`kit corpus`)."""
