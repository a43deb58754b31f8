"""The reference AI Runtime worker (``linectl runtime``): poll → lock →
heartbeat → snapshot → prompt → provider → schema check → result."""
