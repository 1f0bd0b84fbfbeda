"""The control plane: a gRPC controller (``lockgate server``), its worker processes, and the
gRPC client (``lockgate.connect("grpc://host:port")``).

- :mod:`~lockgate.server.service`: the gRPC services and the ``Server`` that runs them;
- :mod:`~lockgate.server.controller`: jobs, runs and workers (the catalog's owner);
- :mod:`~lockgate.server.runner`: one run of a job: a worker, a CycleScheduler, restarts;
- :mod:`~lockgate.server.pool`: worker processes, heartbeats, loss and fencing;
- :mod:`~lockgate.server.worker`: the worker process (one SparkSession);
- :mod:`~lockgate.server.client`: ``GrpcClient`` and ``AsyncGrpcClient``;
- :mod:`~lockgate.server.security`: token, TLS, the loopback rule;
- ``protos/*.proto`` and ``generated/`` (``python -m lockgate.server.codegen``).
"""
