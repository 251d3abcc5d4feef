"""medic.repair: node auto-repair (see docs/architecture.md for the map)."""
