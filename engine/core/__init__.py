"""What an engine core is (the in-process engine the virtual clock drives) and the records every
core hands out: steps, requests, counters. Neutral ground: the simulator and the twin both
implement the protocol and build these records.
"""
