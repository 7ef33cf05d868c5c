"""The schedule-explain report: what a plan runs, why, and what else was considered."""

from teir_plan.explain.pseudocode import pseudocode
from teir_plan.explain.report import Report, explain

__all__ = ["Report", "explain", "pseudocode"]
