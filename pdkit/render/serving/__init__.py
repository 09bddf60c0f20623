"""Serving rendered from the plan: SGLang and router command lines, the fabric environment, the role pod,
and the Kubernetes objects of one deployment (DisaggregatedSet, router, weights Job, compile cache)."""
