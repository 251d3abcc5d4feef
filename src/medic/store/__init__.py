"""medic.store."""
