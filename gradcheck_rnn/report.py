"""Compatibility names for :mod:`gradcheck_rnn.reports` (the report writers moved there)."""

from __future__ import annotations

from .reports import write_reports
from .reports.document import breakdown, case_status, results_document, summary
from .reports.markdown import sparkline

__all__ = ["breakdown", "case_status", "results_document", "sparkline", "summary", "write_reports"]
