"""Renderers: the plan turned into plain objects (Kubernetes manifests, SGLang and router argv, node
user data and image recipe, dashboards and alarms, `pdkit plan` text). Pure functions of the plan: no
AWS, no cluster, no files written. Imports pdkit.model, pdkit.pods (entry points, paths) and pdkit.errors.
"""
