"""Putting the launcher on a machine: the systemd install, planned as a list of steps and then carried out.

May import `config` and the ground floor; nothing imports it but `scripts/install-systemd`.
"""
