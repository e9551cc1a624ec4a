"""A Python client of Loom's JobService, from stubs that protoc and
grpc_python_plugin generated from proto/loom/v1 (Debian's python3-grpcio).

usage: py_client.py ADDR DATA_DIR [--train RUN_DIR STEPS]

Submits a 4-rank job (dp=2 x tp=2), retries it with the same idempotency key,
watches it to the end, streams its logs, and checks the API's status codes on
bad calls. Prints one "ok ..." line per check; exits non-zero on the first
failure. Without --train the agents' workers are expected to print
"rank R of 4"; with --train the job trains a small GPT for STEPS steps into
RUN_DIR and rank 0's log must show the last step.
"""
import os
import sys

import grpc

from proto.loom.v1 import job_pb2, service_pb2, service_pb2_grpc


def fail(msg):
    print("FAIL " + msg)
    sys.exit(1)


def expect_code(call, code, needle=""):
    try:
        call()
    except grpc.RpcError as e:
        if e.code() != code:
            fail("expected %s, got %s: %s" % (code, e.code(), e.details()))
        if needle and needle not in e.details():
            fail("%s: '%s' not in '%s'" % (code, needle, e.details()))
        return
    fail("expected %s, the call succeeded" % code)


def main(addr, data_dir, train=None):
    token = open(os.path.join(data_dir, "token")).read().strip()
    auth = [("authorization", "Bearer " + token)]
    channel = grpc.insecure_channel(addr, options=[("grpc.enable_http_proxy", 0)])
    jobs = service_pb2_grpc.JobServiceStub(channel)

    spec = job_pb2.JobSpec(name="py-2d")
    spec.model.family = "gpt"
    spec.model.n_layer = 1
    spec.model.n_head = 2
    spec.model.d_model = 32
    spec.model.seq_len = 16
    spec.parallel.dp = 2
    spec.parallel.tp = 2
    if train:
        spec.run_dir, steps = train[0], int(train[1])
        spec.train.steps = steps
        spec.train.batch_size = 4
        spec.train.log_every = steps
        spec.train.eval_every = steps
    req = service_pb2.SubmitJobRequest(spec=spec, idempotency_key="py-key-1", wait_for_capacity=True)
    first = jobs.SubmitJob(req, metadata=auth, timeout=10)
    again = jobs.SubmitJob(req, metadata=auth, timeout=10)
    if not again.existing or again.job.job_id != first.job.job_id:
        fail("a retry with the same key made another job")
    print("ok submit %s world_size=%d" % (first.job.job_id, first.job.world_size))

    final = None
    for ev in jobs.WatchJob(service_pb2.WatchJobRequest(job_id=first.job.job_id), metadata=auth, timeout=240):
        final = ev.job
    if final is None or service_pb2.JobState.Name(final.state) != "SUCCEEDED":
        fail("job did not succeed: %s" % final)
    print("ok watch SUCCEEDED")

    by_rank = {}
    logs = jobs.StreamLogs(service_pb2.StreamLogsRequest(job_id=first.job.job_id), metadata=auth, timeout=30)
    for chunk in logs:
        by_rank[chunk.rank] = by_rank.get(chunk.rank, b"") + chunk.data
    if train:
        want = ("step %d/%d" % (steps, steps)).encode()
        if want not in by_rank.get(0, b""):
            fail("rank 0 log lacks %r: %r" % (want, by_rank.get(0)))
        print("ok logs rank 0 trained")
    else:
        for rank in range(4):
            want = ("rank %d of 4\n" % rank).encode()
            if by_rank.get(rank) != want:
                fail("rank %d log: %r" % (rank, by_rank.get(rank)))
        print("ok logs 4 ranks")

    listed = jobs.ListJobs(service_pb2.ListJobsRequest(name_prefix="py-"), metadata=auth, timeout=10)
    if [j.job_id for j in listed.jobs] != [first.job.job_id]:
        fail("ListJobs: %s" % listed)
    print("ok list")

    expect_code(lambda: jobs.GetJob(service_pb2.GetJobRequest(job_id="job-999999"), metadata=auth, timeout=10),
                grpc.StatusCode.NOT_FOUND)
    expect_code(lambda: jobs.GetJob(service_pb2.GetJobRequest(job_id=first.job.job_id),
                                    metadata=[("authorization", "Bearer wrong")], timeout=10),
                grpc.StatusCode.UNAUTHENTICATED)
    expect_code(lambda: jobs.GetJob(service_pb2.GetJobRequest(job_id=first.job.job_id), timeout=10),
                grpc.StatusCode.UNAUTHENTICATED)
    bad = job_pb2.JobSpec()
    bad.CopyFrom(spec)
    bad.name = "py-bad"
    bad.parallel.tp = 3
    expect_code(lambda: jobs.SubmitJob(service_pb2.SubmitJobRequest(spec=bad), metadata=auth, timeout=10),
                grpc.StatusCode.INVALID_ARGUMENT, "parallel.tp")
    print("ok errors")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[3] == "--train":
        main(sys.argv[1], sys.argv[2], (sys.argv[4], sys.argv[5]))
    else:
        main(sys.argv[1], sys.argv[2])
