"""`pdkit timeline`: where the minutes between a block's start and the first token went.

`bundle` captures what EC2 and Kubernetes know while the run goes on (events live one hour) into a
directory that merges across captures; `marks` reads the timestamps out of the captured objects and
log lines; `phases` turns them into per-node and per-pod phases set against the plan's start-up model.
"""
