"""The executor: checks a TEIR program against arrays, lowers it, runs jitted kernels."""

from teir_plan.executor.execute import execute
from teir_plan.executor.threads import get_num_threads, set_num_threads

__all__ = ["execute", "get_num_threads", "set_num_threads"]
