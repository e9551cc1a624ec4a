#include "runtime/service/client_commands.h"

#include <google/protobuf/util/json_util.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/loom/v1/service.grpc.pb.h"
#include "runtime/data/dataset.h"
#include "runtime/jobspec/jobspec.h"
#include "runtime/service/auth/token.h"
#include "runtime/service/server.h"

namespace loom::service {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> flags;
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
  bool Has(const std::string& k) const { return flags.count(k) > 0; }
};

const char* kBoolFlags[] = {"json", "wait-for-capacity", "watch", "follow"};

bool IsBool(const std::string& f) {
  for (const char* b : kBoolFlags) {
    if (f == b) return true;
  }
  return false;
}

bool ParseArgs(const std::vector<std::string>& in, Args* a, std::string* error) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].rfind("--", 0) != 0) {
      a->positional.push_back(in[i]);
      continue;
    }
    std::string name = in[i].substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (!IsBool(name)) {
      if (i + 1 >= in.size()) {
        *error = "--" + name + ": missing value";
        return false;
      }
      value = in[++i];
    }
    a->flags.emplace(name, value);
  }
  return true;
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
  if (j.last_checkpoint_step() >= 0) absl::StrAppend(&s, "  checkpoint=", j.last_checkpoint_step());
  if (!j.wait_reason().empty()) absl::StrAppend(&s, "\n  waiting: ", j.wait_reason());
  if (j.root_cause_rank() >= 0 || !j.root_cause().empty()) {
    absl::StrAppend(&s, "\n  root cause (rank ", j.root_cause_rank(), "): ", j.root_cause());
  }
  return s;
}

class Client {
 public:
  Client(const Args& a, std::ostream& err) : json_(a.Has("json")), err_(err) {
    std::string addr = a.Get("coordinator");
    if (addr.empty()) {
      const char* e = std::getenv("LOOM_COORDINATOR");
      addr = e && *e ? e : "127.0.0.1:7070";
    }
    int t = 30;
    if (a.Has("timeout-s") && (!absl::SimpleAtoi(a.Get("timeout-s"), &t) || t <= 0)) t = 30;
    timeout_ = std::chrono::seconds(t);
    auto flag_or_env = [&](const char* flag, const char* env) {
      std::string v = a.Get(flag);
      const char* e = std::getenv(env);
      return !v.empty() ? v : (e ? std::string(e) : std::string());
    };
    auto creds = MakeClientCredentials(flag_or_env("tls-ca", "LOOM_TLS_CA"), flag_or_env("tls-cert", "LOOM_TLS_CERT"),
                                       flag_or_env("tls-key", "LOOM_TLS_KEY"));
    if (!creds.ok()) {
      setup_error_ = std::string(creds.status().message());
      creds = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    stub_ = v1::JobService::NewStub(grpc::CreateCustomChannel(addr, *creds, args));
    auto tok = FindClientToken(a.Get("data-dir"));
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
    AddBearer(c.get(), token_);
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
  if (a.positional.size() != 1) {
    c.err_ << "usage: loom submit JOB.yaml [--key K] [--wait-for-capacity] [--watch] [--json]\n";
    return 2;
  }
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
  req.set_wait_for_capacity(a.Has("wait-for-capacity"));
  std::string key = a.Get("key");
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
  if (a.Has("watch")) return c.Watch(resp.job().job_id(), out);
  return 0;
}

int Jobs(const Args& a, Client& c, std::ostream& out) {
  if (!c.ready()) return 2;
  v1::ListJobsRequest req;
  for (auto [it, end] = a.flags.equal_range("state"); it != end; ++it) {
    v1::JobState st;
    if (!v1::JobState_Parse(it->second, &st)) {
      c.err_ << "loom: --state: unknown state '" << it->second << "'\n";
      return 2;
    }
    req.add_states(st);
  }
  req.set_name_prefix(a.Get("name-prefix"));
  int limit = 1 << 30;
  if (a.Has("limit") && (!absl::SimpleAtoi(a.Get("limit"), &limit) || limit <= 0)) {
    c.err_ << "loom: --limit: expected a positive integer\n";
    return 2;
  }
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
            << "\trestarts=" << j.restart_count() << "\n";
      }
    }
    if (resp.next_page_token().empty()) return 0;
    req.set_page_token(resp.next_page_token());
  }
}

int Status(const Args& a, Client& c, std::ostream& out) {
  if (a.positional.size() != 1) {
    c.err_ << "usage: loom status JOB_ID [--watch] [--json]\n";
    return 2;
  }
  if (!c.ready()) return 2;
  if (a.Has("watch")) return c.Watch(a.positional[0], out);
  v1::GetJobRequest req;
  req.set_job_id(a.positional[0]);
  v1::GetJobResponse resp;
  grpc::Status s = c.stub_->GetJob(c.Ctx().get(), req, &resp);
  if (!s.ok()) return c.Fail(s);
  out << (c.json_ ? Json(resp.job()) : Text(resp.job())) << "\n";
  return 0;
}

int Cancel(const Args& a, Client& c, std::ostream& out) {
  if (a.positional.size() != 1) {
    c.err_ << "usage: loom cancel JOB_ID\n";
    return 2;
  }
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
  if (a.positional.size() != 1) {
    c.err_ << "usage: loom logs JOB_ID [--rank N] [--follow]\n";
    return 2;
  }
  if (!c.ready()) return 2;
  v1::StreamLogsRequest req;
  req.set_job_id(a.positional[0]);
  req.set_follow(a.Has("follow"));
  if (a.Has("rank")) {
    int rank = 0;
    if (!absl::SimpleAtoi(a.Get("rank"), &rank)) {
      c.err_ << "loom: --rank: expected an integer\n";
      return 2;
    }
    req.set_rank(rank);
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
  std::string error;
  if (!ParseArgs(in, &a, &error)) {
    err << "loom " << cmd << ": " << error << "\n";
    return 2;
  }
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

}  // namespace loom::service
