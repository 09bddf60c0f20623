"""Operations on a live deployment: boto3 (Capacity Blocks, purchase, preflight, node groups, status)
and one Kubernetes layer (reads, scaling, Jobs for validation and the benchmark), with their reports.
May import pdkit.model, pdkit.render and pdkit.pods; never the CLI.
"""
