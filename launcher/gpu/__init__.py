"""What the machine has: GPU inventories, the NVML and nvidia-smi probes, and the catalog of GPU models.

May import the ground floor only (`launcher.errors`, `launcher.units`).
"""
