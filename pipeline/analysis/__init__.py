"""Comparing systems and jobs: paired comparisons and their tables, plots and HTML report, ``ragtrack
compare`` (compare) with its reference systems, tuning on other splits and benchmark tables, and the
query slices they break scores down by. Never imports the executor (a job uses these to compare its
systems)."""
