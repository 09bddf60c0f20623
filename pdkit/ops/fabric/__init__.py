"""Fabric validation before serving: EFA devices and fi_pingpong per node pair, 4-node nccl-tests over
EFA, UCCL-EP low-latency dispatch/combine on the decode group; thresholds from the plan; PASS/FAIL."""
