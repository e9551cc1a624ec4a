// The gRPC CoordinatorClient: loom.v1.JobService with the job's bearer token.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "deploy/operator/reconciler.h"
#include "proto/loom/v1/service.grpc.pb.h"

namespace loom::deploy::operator_ {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

class GrpcCoordinatorClient : public CoordinatorClient {
 public:
  GrpcCoordinatorClient(const std::string& address, std::string token) : token_(std::move(token)) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::JobService::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }

  absl::StatusOr<v1::JobStatus> Submit(const v1::JobSpec& spec, const std::string& key) override {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_idempotency_key(key);
    req.set_wait_for_capacity(true);  // agents register as their pods start
    v1::SubmitJobResponse resp;
    auto ctx = Context();
    grpc::Status s = stub_->SubmitJob(ctx.get(), req, &resp);
    if (!s.ok()) return FromGrpc(s);
    return resp.job();
  }

  absl::StatusOr<v1::JobStatus> Get(const std::string& job_id) override {
    v1::GetJobRequest req;
    req.set_job_id(job_id);
    v1::GetJobResponse resp;
    auto ctx = Context();
    grpc::Status s = stub_->GetJob(ctx.get(), req, &resp);
    if (!s.ok()) return FromGrpc(s);
    return resp.job();
  }

  absl::Status Watch(const std::string& job_id, const std::function<void(const v1::JobStatus&)>& on_event,
                     const std::atomic<bool>* stop) override {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    std::atomic<bool> finished{false};
    // A blocked Read ends only by cancelling the call: watch `stop` beside it.
    std::thread canceller([&] {
      while (!finished && !*stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!finished) ctx.TryCancel();
    });
    v1::WatchJobRequest req;
    req.set_job_id(job_id);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent ev;
    while (reader->Read(&ev)) on_event(ev.job());
    grpc::Status s = reader->Finish();
    finished = true;
    canceller.join();
    if (*stop) return absl::CancelledError("watch stopped");
    return FromGrpc(s);
  }

  absl::Status Cancel(const std::string& job_id) override {
    v1::CancelJobRequest req;
    req.set_job_id(job_id);
    v1::CancelJobResponse resp;
    auto ctx = Context();
    return FromGrpc(stub_->CancelJob(ctx.get(), req, &resp));
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token_);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return ctx;
  }

  std::string token_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace

std::unique_ptr<CoordinatorClient> MakeGrpcCoordinatorClient(const std::string& address, const std::string& token) {
  return std::make_unique<GrpcCoordinatorClient>(address, token);
}

}  // namespace loom::deploy::operator_
