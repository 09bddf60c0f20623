"""pdkit: the domain of the deployment kit (profile, plan, renderers, operations). No CDK imports."""
