"""The seed benchmark: SGLang's bench_serving as a Job against the PD router, its results, and the
report that sets them beside the seed's EFA and RoCE figures and the plan's latency model."""
