"""medic.api."""
