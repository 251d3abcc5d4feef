"""medic.schedulers.sim."""
