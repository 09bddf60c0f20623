"""pdkit: the domain of the deployment kit, by layer (ARCHITECTURE.md): model (profile, plan), pods
(programs run in the kit's pods), render (plan to plain objects), ops (AWS and Kubernetes), cli, and
functions (Lambda handlers). No CDK imports."""
