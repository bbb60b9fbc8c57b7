"""A/B tables, JSON figures and timeline plots, made from saved run directories only."""
