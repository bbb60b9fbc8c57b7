"""Tests of kits, runs, A/B and the command line."""
