#include "runtime/service/client_commands.h"

#include <google/protobuf/util/json_util.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "base/flags.h"
#include "absl/strings/str_cat.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace loom::runtime::service {
namespace {

using Clock = std::chrono::steady_clock;

// The parsed command line: the common flags and each command's own.
struct Args {
  std::vector<std::string> positional, states;
  std::string coordinator, data_dir, tls_ca, tls_cert, tls_key, key, name_prefix;
  int timeout_s = 30, limit = 1 << 30, rank = -1;
  bool json = false, wait_for_capacity = false, watch = false, follow = false;
};

// The flags of `cmd` bound to `a`; an empty `synopsis` when `cmd` is not a
// client command.
FlagSet ClientFlags(const std::string& cmd, Args& a) {
  struct Shape {
    const char* name;
    const char* synopsis;
    const char* about;
  };
  static const Shape kShapes[] = {
      {"submit", "JOB.yaml", "Validates a job spec here, then submits it to the coordinator."},
      {"jobs", "", "Lists jobs, newest first."},
      {"status", "JOB_ID", "Shows one job's status."},
      {"cancel", "JOB_ID", "Cancels a job."},
      {"logs", "JOB_ID", "Shows a job's logs."},
  };
  const Shape* shape = nullptr;
  for (const Shape& sh : kShapes)
    if (cmd == sh.name) shape = &sh;
  FlagSet fs("loom " + cmd, shape ? shape->synopsis : "", shape ? shape->about : "");
  fs.String("coordinator", &a.coordinator, "HOST:PORT", "the coordinator (default 127.0.0.1:7070)")
      .Env("LOOM_COORDINATOR")
      .String("data-dir", &a.data_dir, "DIR", "where the client token is found (unless LOOM_TOKEN is set)")
      .Bool("json", &a.json, "one JSON object per line on stdout")
      .Int("timeout-s", &a.timeout_s, "N", "give up after N seconds", 1)
      .String("tls-ca", &a.tls_ca, "PEM", "use TLS, verify the coordinator against this CA")
      .Env("LOOM_TLS_CA")
      .String("tls-cert", &a.tls_cert, "PEM", "client certificate for mutual TLS")
      .Env("LOOM_TLS_CERT")
      .String("tls-key", &a.tls_key, "PEM", "client key for mutual TLS")
      .Env("LOOM_TLS_KEY");
  if (cmd == "submit") {
    fs.String("key", &a.key, "K", "idempotency key (default: unique per invocation)")
        .Bool("wait-for-capacity", &a.wait_for_capacity, "queue the job until agents can hold it")
        .Bool("watch", &a.watch, "follow the job's state until it ends");
  } else if (cmd == "jobs") {
    fs.Repeated("state", &a.states, "STATE", "only jobs in this state (any case: running, RUNNING)")
        .String("name-prefix", &a.name_prefix, "P", "only jobs whose name starts with P")
        .Int("limit", &a.limit, "N", "at most N jobs", 1);
  } else if (cmd == "status") {
    fs.Bool("watch", &a.watch, "follow the job's state until it ends");
  } else if (cmd == "logs") {
    fs.Int("rank", &a.rank, "N", "only rank N's log", 0).Bool("follow", &a.follow, "keep streaming as the job runs");
  }
  if (shape && *shape->synopsis) fs.Positionals(&a.positional, shape->synopsis, 1, 1);
  return fs;
}

// "PENDING, RUNNING, ...": the states --state accepts.
std::string StateNames() {
  std::string names;
  const auto* d = v1::JobState_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    if (d->value(i)->number() == v1::JOB_STATE_UNSPECIFIED) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ", absl::AsciiStrToLower(d->value(i)->name()));
  }
  return names;
}

int ExitCodeFor(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return 0;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN: return 1;
    default: return 2;
  }
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string Text(const v1::JobStatus& j) {
  std::string s = absl::StrCat(j.job_id(), "  ", v1::JobState_Name(j.state()), "  name=", j.name(),
                               "  ranks=", j.world_size(), "  restarts=", j.restart_count(), "  step=", j.current_step());
  if (!j.submitter().empty()) absl::StrAppend(&s, "  submitter=", j.submitter());
  if (j.last_checkpoint_step() >= 0) absl::StrAppend(&s, "  checkpoint=", j.last_checkpoint_step());
  if (!j.wait_reason().empty()) absl::StrAppend(&s, "\n  waiting: ", j.wait_reason());
  if (j.root_cause_rank() >= 0 || !j.root_cause().empty()) {
    absl::StrAppend(&s, "\n  root cause (rank ", j.root_cause_rank(), "): ", j.root_cause());
  }
  return s;
}

class Client {
 public:
  Client(const Args& a, std::ostream& err) : json_(a.json), err_(err) {
    const std::string addr = a.coordinator.empty() ? "127.0.0.1:7070" : a.coordinator;
    timeout_ = std::chrono::seconds(a.timeout_s);
    auto creds = MakeClientCredentials(a.tls_ca, a.tls_cert, a.tls_key);
    if (!creds.ok()) {
      setup_error_ = std::string(creds.status().message());
      creds = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::JobService::NewStub(grpc::CreateCustomChannel(addr, *creds, args));
    auto tok = auth::FindClientToken(a.data_dir);
    if (tok.ok()) {
      token_ = *tok;
    } else if (setup_error_.empty()) {
      setup_error_ = std::string(tok.status().message());
    }
  }

  bool ready() {
    if (setup_error_.empty()) return true;
    err_ << "loom: " << setup_error_ << "\n";
    return false;
  }

  std::unique_ptr<grpc::ClientContext> Ctx(bool stream = false) {
    auto c = std::make_unique<grpc::ClientContext>();
    auth::AddBearer(c.get(), token_);
    if (!stream) c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }

  int Fail(const grpc::Status& s) {
    err_ << "loom: " << StatusName(s) << ": " << s.error_message() << "\n";
    return ExitCodeFor(s);
  }

  static std::string StatusName(const grpc::Status& s) {
    static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                   "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                   "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                   "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    int c = static_cast<int>(s.error_code());
    return c >= 0 && c <= 16 ? kNames[c] : absl::StrCat(c);
  }

  // Streams state changes; returns 0 when the job SUCCEEDED.
  int Watch(const std::string& id, std::ostream& out) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    auto ctx = Ctx(true);
    auto reader = stub_->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&ev)) {
      out << (json_ ? Json(ev.job()) : Text(ev.job())) << "\n" << std::flush;
      last = ev.job().state();
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return Fail(s);
    return last == v1::SUCCEEDED ? 0 : 1;
  }

  bool json_;
  std::ostream& err_;
  std::chrono::seconds timeout_{30};
  std::unique_ptr<v1::JobService::Stub> stub_;
  std::string token_, setup_error_;
};

int Submit(const Args& a, Client& c, std::ostream& out) {
  auto spec = jobspec::LoadJobSpec(a.positional[0]);
  if (!spec.ok()) {
    c.err_ << "loom: " << spec.status().message() << "\n";
    return 2;
  }
  // The data as this machine sees it: headers, and every id of small data.
  if (absl::Status s = data::CheckData(*spec); !s.ok()) {
    c.err_ << "loom: " << s.message() << "\n";
    return 2;
  }
  if (!c.ready()) return 2;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  req.set_wait_for_capacity(a.wait_for_capacity);
  std::string key = a.key;
  if (key.empty()) {  // unique per invocation; reused by this command's retries
    key = absl::StrCat("cli-", std::chrono::system_clock::now().time_since_epoch().count(), "-", getpid());
  }
  req.set_idempotency_key(key);
  v1::SubmitJobResponse resp;
  grpc::Status s;
  auto deadline = Clock::now() + c.timeout_;
  auto backoff = std::chrono::milliseconds(100);
  for (;;) {
    s = c.stub_->SubmitJob(c.Ctx().get(), req, &resp);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || Clock::now() + backoff > deadline) break;
    std::this_thread::sleep_for(backoff);  // same key: a retry, never a duplicate
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
  if (!s.ok()) return c.Fail(s);
  out << (c.json_ ? Json(resp.job()) : Text(resp.job())) << "\n";
  if (a.watch) return c.Watch(resp.job().job_id(), out);
  return 0;
}

int Jobs(const Args& a, Client& c, std::ostream& out) {
  if (!c.ready()) return 2;
  v1::ListJobsRequest req;
  for (const std::string& name : a.states) {
    v1::JobState st;
    if (!v1::JobState_Parse(absl::AsciiStrToUpper(name), &st) || st == v1::JOB_STATE_UNSPECIFIED) {
      c.err_ << "loom jobs: --state: unknown state '" << name << "' (states: " << StateNames() << ")\n";
      return 2;
    }
    req.add_states(st);
  }
  req.set_name_prefix(a.name_prefix);
  const int limit = a.limit;
  req.set_page_size(std::min(limit, 1000));
  int shown = 0;
  for (;;) {
    v1::ListJobsResponse resp;
    grpc::Status s = c.stub_->ListJobs(c.Ctx().get(), req, &resp);
    if (!s.ok()) return c.Fail(s);
    for (const auto& j : resp.jobs()) {
      if (shown++ >= limit) return 0;
      if (c.json_) {
        out << Json(j) << "\n";
      } else {
        out << j.job_id() << "\t" << v1::JobState_Name(j.state()) << "\t" << j.name() << "\tranks=" << j.world_size()
            << "\trestarts=" << j.restart_count() << "\tsubmitter=" << j.submitter() << "\n";
      }
    }
    if (resp.next_page_token().empty()) return 0;
    req.set_page_token(resp.next_page_token());
  }
}

int Status(const Args& a, Client& c, std::ostream& out) {
  if (!c.ready()) return 2;
  if (a.watch) return c.Watch(a.positional[0], out);
  v1::GetJobRequest req;
  req.set_job_id(a.positional[0]);
  v1::GetJobResponse resp;
  grpc::Status s = c.stub_->GetJob(c.Ctx().get(), req, &resp);
  if (!s.ok()) return c.Fail(s);
  out << (c.json_ ? Json(resp.job()) : Text(resp.job())) << "\n";
  return 0;
}

int Cancel(const Args& a, Client& c, std::ostream& out) {
  if (!c.ready()) return 2;
  v1::CancelJobRequest req;
  req.set_job_id(a.positional[0]);
  v1::CancelJobResponse resp;
  grpc::Status s = c.stub_->CancelJob(c.Ctx().get(), req, &resp);
  if (!s.ok()) return c.Fail(s);
  out << (c.json_ ? Json(resp.job()) : Text(resp.job())) << "\n";
  return 0;
}

int Logs(const Args& a, Client& c, std::ostream& out) {
  if (!c.ready()) return 2;
  v1::StreamLogsRequest req;
  req.set_job_id(a.positional[0]);
  req.set_follow(a.follow);
  if (a.rank >= 0) {
    req.set_rank(a.rank);
    req.set_has_rank(true);
  }
  auto ctx = c.Ctx(/*stream=*/true);
  auto reader = c.stub_->StreamLogs(ctx.get(), req);
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    if (c.json_) {
      out << Json(chunk) << "\n";
    } else {
      out << chunk.data();
    }
    out.flush();
  }
  grpc::Status s = reader->Finish();
  return s.ok() ? 0 : c.Fail(s);
}

}  // namespace

int RunClientCommand(const std::string& cmd, const std::vector<std::string>& in, std::ostream& out,
                     std::ostream& err) {
  Args a;
  FlagSet fs = ClientFlags(cmd, a);
  if (std::optional<int> rc = fs.Parse(in, out, err)) return *rc;
  Client c(a, err);
  if (cmd == "submit") return Submit(a, c, out);
  if (cmd == "jobs") return Jobs(a, c, out);
  if (cmd == "status") return Status(a, c, out);
  if (cmd == "cancel") return Cancel(a, c, out);
  if (cmd == "logs") return Logs(a, c, out);
  err << "loom: unknown command '" << cmd << "'\n";
  return 2;
}

int RunSubmitCommand(const std::vector<std::string>& a) { return RunClientCommand("submit", a, std::cout, std::cerr); }
int RunJobsCommand(const std::vector<std::string>& a) { return RunClientCommand("jobs", a, std::cout, std::cerr); }
int RunStatusCommand(const std::vector<std::string>& a) { return RunClientCommand("status", a, std::cout, std::cerr); }
int RunCancelCommand(const std::vector<std::string>& a) { return RunClientCommand("cancel", a, std::cout, std::cerr); }
int RunLogsCommand(const std::vector<std::string>& a) { return RunClientCommand("logs", a, std::cout, std::cerr); }

}  // namespace loom::runtime::service
