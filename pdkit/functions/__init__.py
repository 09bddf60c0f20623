"""AWS Lambda handlers. Standard library + boto3 only; stacks/function_code.py bundles each with the few
pdkit modules it imports (for example pdkit/model/reservation.py)."""
