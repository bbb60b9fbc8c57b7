"""One arm end to end, on either clock: the wall-clock driver (HTTP over asyncio) and the
virtual-clock driver (engine time in one process), and their shared parts: the launcher
choice, the engine core, the arm recorder, the live view, what happens at a stall, and the
start-up checks.
"""
