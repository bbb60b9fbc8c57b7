"""Tests of the contract layer and of the import graph."""
