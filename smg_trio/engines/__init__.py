"""I/O. Reference engines speaking the real wires, for the demo, the tests and the bench."""
