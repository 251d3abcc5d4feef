"""medic.control."""
