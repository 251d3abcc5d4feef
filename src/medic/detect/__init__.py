"""medic.detect."""
