"""`kit engine conformance`: vLLM's own scheduler tests (`tests/v1/core`) on stock and on a
scheduler under test: fetch the tests, run pytest twice, compare test by test, print the table.
"""
