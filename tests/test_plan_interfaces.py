"""The GPU nodes' network-interface layout, decided once in the plan (pdkit/model/plan.py `_interfaces`), asserted
field by field rather than only through the capacity stack's snapshot.

EC2's layout for instances with several network cards
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): the primary interface
(network card 0, device 0) is an ENA interface, never EFA-only; an EFA-only interface at card 0 device 1;
each further one at the next unused card, device 0. A (card, device) pair used twice is refused by
RunInstances, and a missing card silently halves the fabric (NCCL still "works").
"""

from __future__ import annotations

import pytest

from pdkit.errors import ProfileError
from pdkit.model import catalog, plan, profile_files
from pdkit.model.plan import NetworkInterface


@pytest.fixture(scope="module")
def seed():
    prof, path = profile_files.load(None)
    return plan.build(prof, profile_path=path)


def _with_efa_devices(devices):
    prof, _ = profile_files.load(None)
    raw = prof.model_dump(mode="json", exclude_unset=True)
    raw["capacity"]["efa_devices"] = devices
    return plan.build(profile_files.parse(raw), profile_path="<test>")


def test_p5en_gets_the_documented_layout_exactly(seed):
    """p5en.48xlarge: 16 network cards, 16 EFA devices; the ENA primary plus one EFA-only per card."""
    it = catalog.instance_types()["p5en.48xlarge"]
    assert (it.network_cards, it.efa_devices) == (16, 16)
    expected = (
        NetworkInterface(0, 0, "interface"),
        NetworkInterface(0, 1, "efa-only"),
        *(NetworkInterface(card, 0, "efa-only") for card in range(1, 16)),
    )
    assert seed.network_interfaces == expected


def test_no_card_and_device_pair_is_used_twice(seed):
    pairs = [(n.card, n.device) for n in seed.network_interfaces]
    assert len(pairs) == len(set(pairs)) == 17


def test_only_the_primary_carries_ips(seed):
    assert [(n.card, n.device) for n in seed.network_interfaces if n.carries_ips] == [(0, 0)]
    assert all(not n.carries_ips for n in seed.network_interfaces[1:])


@pytest.mark.parametrize("devices", [1, 2, 15, 16])
def test_fewer_efa_devices_take_the_first_cards_in_order(devices):
    """capacity.efa_devices = k: card 0 device 1 first, then cards 1..k-1 at device 0; the primary stays."""
    layout = _with_efa_devices(devices).network_interfaces
    assert layout[0] == NetworkInterface(0, 0, "interface")
    assert [(n.card, n.device, n.kind) for n in layout[1:]] == [(0, 1, "efa-only")] + [(c, 0, "efa-only") for c in range(1, devices)]


@pytest.mark.parametrize("devices", [0, 17, -1])
def test_efa_devices_outside_what_the_instance_has_are_refused(devices):
    with pytest.raises(ProfileError) as err:
        _with_efa_devices(devices)
    assert (err.value.field, err.value.value) == ("capacity.efa_devices", devices)
    assert "p5en.48xlarge has 16 EFA devices" in str(err.value)
    assert "use 1..16" in str(err.value)
