"""`kit rules --backtest`'s orchestration: a recorded history served by a Prometheus of its own."""
