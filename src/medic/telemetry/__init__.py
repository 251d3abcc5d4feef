"""medic.telemetry."""
