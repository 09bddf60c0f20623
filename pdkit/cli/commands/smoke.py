"""`pdkit smoke`: one chat completion through the PD router; prints TTFT, tokens/s and the text."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary

# {port}: the router's Service port, which is its container port (pdkit/render/serving/manifests.py router_service).
FORWARDING = """\
The router is internal. Forward it to local port 8000 first, through the SSM access host (its id is
the cluster stack output AccessHostId) to the router's internal load balancer (port {port}):
  aws ssm start-session --target <instance> --document-name AWS-StartPortForwardingSessionToRemoteHost \\
      --parameters host=<router load balancer DNS name>,portNumber={port},localPortNumber=8000
or, with kubectl already working through that host (runbooks/01-cluster.md):
  kubectl -n <serving namespace> port-forward svc/<router service> 8000:{port}
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from pdkit.ops.smoke import DEFAULT_URL
    from pdkit.render.serving.ports import ROUTER_PORT

    p = sub.add_parser(
        "smoke",
        parents=[common],
        help=summary("smoke"),
        epilog=FORWARDING.format(port=ROUTER_PORT),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", default=DEFAULT_URL, help=f"router base URL (default {DEFAULT_URL}, a local port-forward)")
    p.add_argument("--model", help="served model name (default: the profile's model.served_name, else model.id)")
    p.add_argument("--prompt", default="In two sentences, what does prefill/decode disaggregation change for an LLM server?")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="first request after start-up can be slow (default 300)")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan
    from pdkit.ops import smoke

    plan = load_plan(args.profile)
    model = args.model or plan.served_model_name
    result = smoke.chat(
        args.url, model=model, prompt=args.prompt, max_tokens=args.max_tokens, timeout=args.timeout, waiting=console.waiting
    )
    if args.output == "json":
        console.print_json(result.to_dict())
        return 0
    rate = f"{result.tokens_per_s:.1f} tokens/s after the first" if result.tokens_per_s else "too few tokens for a rate"
    console.say(
        f"TTFT {result.ttft_s * 1000:.0f} ms · {result.completion_tokens} tokens ({result.tokens_counted_by}) in {result.total_s:.2f} s · {rate} · "
        f"model {result.model} · finish {result.finish_reason}"
    )
    if result.reasoning:
        console.say(f"Reasoning: {result.reasoning.strip()}")
    console.say(f"Answer: {result.text.strip() or '(empty: the model spent max_tokens reasoning; raise --max-tokens)'}")
    return 0
