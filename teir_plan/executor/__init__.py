"""The executor: checks a TEIR program against arrays, lowers it, runs jitted kernels."""

from teir_plan.executor import cache

cache.install()  # before any kernel module defines a cached function

from teir_plan.executor.execute import execute  # noqa: E402
from teir_plan.executor.threads import get_num_threads, set_num_threads  # noqa: E402

__all__ = ["execute", "get_num_threads", "set_num_threads"]
