"""Planning and running work: training, planned runs, evaluation, grids, executors, plans, nightly."""
