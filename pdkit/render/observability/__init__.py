"""Observability as data: what is collected (catalog), what is derived from it (figures), and the
renderers of the scrape configuration, dashboards and alarms that the observability stack deploys.

`catalog` and `figures` are standard library only: the serving-metrics and block-clock Lambda
functions ship them as they are (stacks/function_code.py).
"""
