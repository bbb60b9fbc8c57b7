"""Summaries of a load run: the contract's pure summary of turn records, under loadgen's names.

`stallkit.contract.summary` holds the model (`summary.json`) and the function; see there why.
"""

from __future__ import annotations

from stallkit.contract.summary import (
    ERROR_OUTCOMES,
    LoadSummary,
    Percentiles,
    percentiles,
    summarize,
)

__all__ = ["ERROR_OUTCOMES", "LoadSummary", "Percentiles", "percentiles", "summarize"]
