"""The request planner: what each request of an API key's budget is spent on (see planner.py)."""
