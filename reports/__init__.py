"""A/B tables, JSON figures and timeline plots, made from saved run directories only.

The names below are the package's public face, for the orchestration: the A/B report, its
table and the writer of every report file. Each is imported from its module on first use,
so `import stallkit.reports` itself imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stallkit.contract.faces import public_face

if TYPE_CHECKING:  # the face, once: each name and its module (run time: loaded on first use)
    from stallkit.reports.ab_figures import ABReport as ABReport
    from stallkit.reports.ab_rich import ab_table as ab_table
    from stallkit.reports.backtest_html import write_backtest_html as write_backtest_html
    from stallkit.reports.corpus_rich import corpus_table as corpus_table
    from stallkit.reports.corpus_rich import engine_cell as engine_cell
    from stallkit.reports.errors import DamagedRunError as DamagedRunError
    from stallkit.reports.errors import ReportError as ReportError
    from stallkit.reports.sweep_figures import arm_seed_row as arm_seed_row
    from stallkit.reports.sweep_figures import quiet_span_s as quiet_span_s
    from stallkit.reports.sweep_figures import write_sweep_reports as write_sweep_reports
    from stallkit.reports.sweep_html import rate_summary as rate_summary
    from stallkit.reports.write import write_reports as write_reports

if not TYPE_CHECKING:
    __all__, __getattr__, __dir__ = public_face(__name__)
