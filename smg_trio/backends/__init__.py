"""I/O. The gateway's engine clients (ZMQ, gRPC) around one in-flight table."""
