"""Real storage emulators on free loopback ports, started and stopped by fixtures."""
