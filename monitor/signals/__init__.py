"""What the monitor reads: a `/metrics` page parsed into a typed snapshot, counter rates, the
scrape, and GPU utilisation from its source.
"""
