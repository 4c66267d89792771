"""Generated from protos/ by `make protos` (scripts/gen_protos.py); never edit by hand.

`*_pb2` modules hold the protobuf messages (typed by their `.pyi` stubs), `*_grpc` modules the
grpclib client stubs and server bases. `make protos-check` fails when these files are stale.
"""
