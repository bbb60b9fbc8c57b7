"""`kit sweep`: the plan (axes, cells), its execution (cells' kits, what is missing, reports)
and the runners (local worker processes or Ray tasks).
"""
