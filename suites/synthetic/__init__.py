"""The synthetic suite: zoology's MQAR and MAD-lab's six tasks (docs/synthetic.md)."""

from suites.synthetic.suite import PLOT_NAME, Synthetic, SyntheticConfig
from suites.synthetic.tasks import TASKS, get_task

__all__ = ["PLOT_NAME", "Synthetic", "SyntheticConfig", "TASKS", "get_task"]
