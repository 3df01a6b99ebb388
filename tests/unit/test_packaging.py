"""Our import packages have generic names; fail when another distribution claims one of them."""

from __future__ import annotations

import importlib.metadata

PACKAGES = ("crashwatch", "stream", "pipeline", "sinks")


def test_no_other_distribution_ships_our_packages() -> None:
    owners = importlib.metadata.packages_distributions()
    for package in PACKAGES:
        claimed = set(owners.get(package, ["crashwatch"]))
        assert claimed == {"crashwatch"}, f"{package} is also shipped by {sorted(claimed - {'crashwatch'})}"
