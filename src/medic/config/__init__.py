"""Typed settings: defaults < YAML file < ``MEDIC_*`` environment < command-line overrides."""
