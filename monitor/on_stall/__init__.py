"""What happens when a stall starts: the exporter's `stallkit_*` series, `--on-stall`
commands, and the forensics bundle.
"""
