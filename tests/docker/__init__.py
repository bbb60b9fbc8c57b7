"""Tests against real docker daemons."""
