"""Tests against a real vLLM (skipped without one)."""
