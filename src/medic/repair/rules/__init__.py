"""medic.repair.rules: node repair's pure decisions (no I/O, time passed in)."""
