"""What the operator wrote: the profile (typed, frozen), its loader, the flag catalog and secret references.

May import the ground floor only (`launcher.errors`, `launcher.units`).
"""
