"""The human side of a purchase: the dry run first, then the operator types the upfront fee.

Purchases are upfront and cannot be cancelled, so the order is fixed and each step can stop it:
1. the caller has already found the offering again and shown its fee;
2. the same request with DryRun=True must fail with `DryRunOperation` (EC2's "you may do this");
   any other answer, including a normal response from an endpoint that ignored DryRun, stops here;
3. a person types the upfront fee (or `--yes` was given); without a terminal and without `--yes`
   nothing is bought;
4. `buy` sends the request once (pdkit.ops.purchase).
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/CommonParameters.html (DryRun)
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import TypeVar

from pdkit import console
from pdkit.errors import Interrupted, KitError
from pdkit.ops.capacity import money
from pdkit.ops.purchase import dry_run

T = TypeVar("T")


def confirm(fee: Decimal, currency: str, *, assume_yes: bool, what: str) -> None:
    """Require the operator to type the fee; refuse without a terminal unless --yes was given."""
    price = money(fee, currency)
    if assume_yes:
        console.say(f"--yes given: buying {what} for {price} without a prompt.", stderr=True)
        return
    if not console.interactive():
        raise KitError(
            f"no terminal to confirm a non-cancellable purchase of {price}; nothing was bought. "
            "Fix: run the command in a terminal, or add --yes once you have checked the fee"
        )
    answer = console.ask(f"This is upfront and cannot be cancelled. Type the fee ({fee:,.2f}) to buy {what}, anything else cancels: ")
    if _amount(answer, currency) != fee:
        raise KitError("cancelled: what you typed is not the fee; nothing was bought")


def guarded(
    *,
    what: str,
    fee: Decimal,
    currency: str,
    dry: Callable[[], object],
    buy: Callable[[], T],
    assume_yes: bool,
    look_for: str,
) -> T:
    """`look_for`: how to find the purchase if the process is stopped once it is sent (the tag and the lookup command)."""
    dry_run(dry, what=what)
    console.say(f"Dry run passed: your credentials may buy {what}.", stderr=True)
    confirm(fee, currency, assume_yes=assume_yes, what=what)
    console.say(f"Sending the purchase of {what} to EC2 once (never retried: the API has no idempotency token)...", stderr=True)
    try:
        with stop_signals_interrupt():
            return buy()
    except KeyboardInterrupt:
        # A first Ctrl-C while the request was out is an unclear answer, which pdkit.ops.purchase.send_once follows
        # with its lookup; this one came during that lookup, or as SIGTERM/SIGHUP: nothing more is sent.
        raise Interrupted(
            f"stopped after the purchase of {what} was sent to EC2 once; it may have been bought. Nothing else was sent. "
            f"Fix: before buying again, {look_for}"
        ) from None


@contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a CI runner's cancel) end the process without a trace by default;
    during a purchase they become KeyboardInterrupt, so the caller says what was sent before the process ends."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    kept = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)


def _amount(text: str, currency: str) -> Decimal | None:
    cleaned = re.sub(rf"(?i)\b{re.escape(currency)}\b|[,\s$]", "", text)
    try:
        return Decimal(cleaned) if cleaned else None
    except InvalidOperation:
        return None
