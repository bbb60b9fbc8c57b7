"""The test suite; it mirrors the packages."""
