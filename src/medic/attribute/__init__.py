"""medic.attribute."""
