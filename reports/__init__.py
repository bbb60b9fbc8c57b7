"""A/B tables, JSON figures and timeline plots, made from saved run directories only.

The names below are the package's public face, for the orchestration: the A/B report, its
table and the writer of every report file. Each is imported from its module on first use,
so `import reports` itself imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contract.faces import lazy_face

if TYPE_CHECKING:
    from reports.ab import ABReport
    from reports.errors import ReportError
    from reports.view import ab_table
    from reports.write import write_reports

#: public name -> the module that defines it
_LAZY = {
    "ABReport": "reports.ab",
    "ab_table": "reports.view",
    "write_reports": "reports.write",
    "ReportError": "reports.errors",
}

__all__ = [
    "ABReport",
    "ReportError",
    "ab_table",
    "write_reports",
]

if not TYPE_CHECKING:  # mypy reads the imports above; at run time names load on first use
    __getattr__, __dir__ = lazy_face(__name__, _LAZY)
