// Latency of the coordinator's JobService over real gRPC on loopback:
// durable SubmitJob, then GetJob and ListJobs (page of 50, a random page)
// over 1000 jobs, paced at 100 requests/s, against a target of p99 under
// 20 ms; then the store write behind a progress report, with and without an
// fsync. Prints p50/p90/p99 per call.
//
//   bazel run //runtime/service:api_latency_benchmark -- [jobs] [requests]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace {

using Clock = std::chrono::steady_clock;

void Report(const char* what, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto q = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))]; };
  std::printf("%-22s n=%-5zu p50=%7.3f ms  p90=%7.3f ms  p99=%7.3f ms  max=%7.3f ms\n", what, ms.size(), q(0.5),
              q(0.9), q(0.99), ms.back());
}

// The store write behind each progress report, as the coordinator holds its
// lock for it: the progress write (no fsync of its own) against the same
// change as a durable Update. Job 1 is moved to RUNNING first.
int StoreWrites(loom::runtime::service::store::JobStore* st, int n) {
  using loom::runtime::service::store::JobRecord;
  for (auto state : {loom::v1::SCHEDULED, loom::v1::RUNNING}) {
    if (!st->Update(1, [&](JobRecord& j) { j.state = state; }).ok()) return 1;
  }
  std::vector<double> progress, durable;
  for (int i = 1; i <= n; ++i) {
    auto t0 = Clock::now();
    if (!st->UpdateProgress(1, 2 * i, -1).ok()) return 1;
    progress.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    t0 = Clock::now();
    if (!st->Update(1, [&](JobRecord& j) { j.current_step = 2 * i + 1; }).ok()) return 1;
    durable.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  Report("store: progress write", progress);
  Report("store: same, durable", durable);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom;
  int njobs = argc > 1 ? std::atoi(argv[1]) : 1000;
  int nreq = argc > 2 ? std::atoi(argv[2]) : 500;
  std::string dir = std::filesystem::temp_directory_path() / ("loom_api_bench_" + std::to_string(getpid()));
  runtime::service::ServerOptions o;
  o.coordinator.data_dir = dir;
  auto server = runtime::service::CoordinatorServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto ch = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                      grpc::InsecureChannelCredentials(), args);
  auto stub = v1::JobService::NewStub(ch);
  auto ctx = [&] {
    auto c = std::make_unique<grpc::ClientContext>();
    runtime::service::auth::AddBearer(c.get(), (*server)->token());
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };

  std::vector<double> submit;
  for (int i = 0; i < njobs; ++i) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name("bench-" + std::to_string(i));
    req.mutable_spec()->mutable_parallel()->set_dp(2);
    req.set_idempotency_key("k" + std::to_string(i));
    req.set_wait_for_capacity(true);
    v1::SubmitJobResponse resp;
    auto t0 = Clock::now();
    grpc::Status s = stub->SubmitJob(ctx().get(), req, &resp);
    submit.push_back(since(t0));
    if (!s.ok()) {
      std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  std::mt19937 rng(1);
  std::vector<double> get, list;
  auto next = Clock::now();
  const auto period = std::chrono::milliseconds(10);  // 100 requests/s
  for (int i = 0; i < 2 * nreq; ++i) {
    std::this_thread::sleep_until(next);
    next += period;
    auto t0 = Clock::now();
    grpc::Status s;
    if (i % 2 == 0) {
      v1::GetJobRequest req;
      req.set_job_id("job-" + std::to_string(1 + rng() % njobs));
      v1::GetJobResponse resp;
      s = stub->GetJob(ctx().get(), req, &resp);
      get.push_back(since(t0));
    } else {
      v1::ListJobsRequest req;
      req.set_page_size(50);
      req.set_page_token(std::to_string(rng() % njobs));
      v1::ListJobsResponse resp;
      s = stub->ListJobs(ctx().get(), req, &resp);
      list.push_back(since(t0));
    }
    if (!s.ok()) {
      std::fprintf(stderr, "query: %s\n", s.error_message().c_str());
      return 1;
    }
  }
  std::printf("coordinator API over loopback gRPC, %d jobs in the store\n", njobs);
  Report("SubmitJob (durable)", submit);
  Report("GetJob @100/s", get);
  Report("ListJobs(50) @100/s", list);
  if (StoreWrites((*server)->coordinator()->store(), nreq) != 0) {
    std::fprintf(stderr, "store writes failed\n");
    return 1;
  }
  (*server)->Shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}
