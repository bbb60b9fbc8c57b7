"""`kit hunt`: search a space of kit settings for one where an arm stalls, then shrink it to a
reproducer (plan, and its execution on the sweep's runners).
"""
