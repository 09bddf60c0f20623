"""AWS Lambda handlers. Standard library + boto3 only; bundled with pdkit/reservation.py by stacks/function_code.py."""
