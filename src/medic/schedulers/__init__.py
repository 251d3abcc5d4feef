"""medic.schedulers."""
