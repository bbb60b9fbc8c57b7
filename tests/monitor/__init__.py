"""Tests of the monitor."""
