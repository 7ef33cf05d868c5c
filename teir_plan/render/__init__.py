"""The schedule-explain report: what a plan runs, why, and what else was considered."""

from teir_plan.render.explain_call import explain
from teir_plan.render.pseudocode import pseudocode
from teir_plan.render.report import Report

__all__ = ["Report", "explain", "pseudocode"]
