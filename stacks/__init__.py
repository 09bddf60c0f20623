"""CDK stacks and constructs. They render decisions from pdkit's plan; they decide nothing."""
