"""Tests of the engine package and the simulator."""
