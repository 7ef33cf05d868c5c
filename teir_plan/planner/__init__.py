"""The planner: candidate TEIR schedules, the cost model that ranks them, the search."""
