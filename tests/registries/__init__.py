"""Modules holding job registries, imported by the registry tests as users' modules are."""
