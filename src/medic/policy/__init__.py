"""medic.policy."""
