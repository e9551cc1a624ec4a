"""Fills a coordinator's job store for the dashboard's scale case: submits N
small jobs through the real JobService (gRPC, the stubs Bazel generated from
proto/loom/v1; Debian's python3-grpcio) and cancels every k-th one, so that
the store holds N jobs in two states: PENDING (no agent has joined) and
CANCELLED.

usage: PYTHONPATH=bazel-bin /usr/bin/python3 fill_store.py ADDR DATA_DIR N K

Prints "submitted N, cancelled C" and exits 0; any RPC error exits 1.
"""
import os
import sys

import grpc

from proto.loom.v1 import job_pb2, service_pb2, service_pb2_grpc


def main(addr, data_dir, n, k):
    token = open(os.path.join(data_dir, "token")).read().strip()
    auth = [("authorization", "Bearer " + token)]
    channel = grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)])
    jobs = service_pb2_grpc.JobServiceStub(channel)
    cancelled = 0
    for i in range(1, n + 1):
        spec = job_pb2.JobSpec(name="scale-%04d" % i)
        spec.model.family = "gpt"
        spec.model.n_layer = 1
        spec.model.n_head = 2
        spec.model.d_model = 32
        spec.model.seq_len = 16
        spec.train.steps = 10
        spec.train.batch_size = 4
        req = service_pb2.SubmitJobRequest(spec=spec, wait_for_capacity=True)
        job = jobs.SubmitJob(req, metadata=auth, timeout=10).job
        if i % k == 0:
            jobs.CancelJob(service_pb2.CancelJobRequest(job_id=job.job_id), metadata=auth, timeout=10)
            cancelled += 1
    print("submitted %d, cancelled %d" % (n, cancelled))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    except grpc.RpcError as e:
        print("FAIL %s: %s" % (e.code(), e.details()))
        sys.exit(1)
