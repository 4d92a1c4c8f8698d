"""Test stand-ins for the runner: executables that imitate a framework's sink and faults, never a framework."""
