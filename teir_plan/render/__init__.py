"""The schedule-explain report: what a plan runs, why, and what else was considered."""

from teir_plan.render.pseudocode import pseudocode
from teir_plan.render.report import Report, explain

__all__ = ["Report", "explain", "pseudocode"]
