"""Memory schedules: peak-memory models of MCUBERT and the baselines (memory.py), and the arena
planner that picks tiles and offsets for a whole model (planner.py)."""
