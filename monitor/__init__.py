"""Scrape vLLM metrics and GPU telemetry, detect stalls, show them live."""
