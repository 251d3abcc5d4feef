"""medic.cli."""
