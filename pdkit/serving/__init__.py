"""The serving layer rendered from the plan: SGLang and router command lines, Kubernetes objects,
weights manifest and node-local staging.

Kept import-free so `python -m pdkit.serving.staging` in an init container loads only what it uses.
"""
