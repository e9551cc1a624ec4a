// GET /api/v1/jobs/<id>/logs and the /events stream of the dashboard API.
#include <sys/stat.h>

#include <chrono>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/service/dashboard/api.h"
#include "runtime/service/dashboard/api_json.h"

namespace loom::runtime::service::dashboard::internal {
namespace {

using Offsets = std::map<std::string, int64_t>;
using Clock = std::chrono::steady_clock;

constexpr int64_t kDefaultLogBytes = 64 * 1024;
constexpr int64_t kMaxLogBytes = 1 << 20;
constexpr int64_t kStreamLogBytes = 256 * 1024;  // per round of the event stream
constexpr auto kKeepalive = std::chrono::seconds(10);
constexpr auto kPoll = std::chrono::milliseconds(250);

// Cursor: "<rank>.<stream>:<offset>" entries joined by ';' (opaque to clients).
std::string EncodeCursor(const Offsets& o) {
  std::string out;
  for (const auto& [key, off] : o) absl::StrAppend(&out, out.empty() ? "" : ";", key, ":", off);
  return out;
}

bool DecodeCursor(const std::string& s, Offsets* o) {
  for (absl::string_view part : absl::StrSplit(s, ';', absl::SkipEmpty())) {
    std::vector<absl::string_view> kv = absl::StrSplit(part, ':');
    std::vector<absl::string_view> rs = kv.size() == 2 ? absl::StrSplit(kv[0], '.') : std::vector<absl::string_view>{};
    int64_t off = 0;
    int32_t rank = 0;
    if (rs.size() != 2 || !absl::SimpleAtoi(rs[0], &rank) || rank < 0 || (rs[1] != "stdout" && rs[1] != "stderr") ||
        !absl::SimpleAtoi(kv[1], &off) || off < 0) {
      return false;
    }
    (*o)[std::string(kv[0])] = off;
  }
  return true;
}

// Complete lines of `chunks` as {"rank","stream","text"}; the bytes after a
// file's last newline go back (its offset rewound) unless `flush`, or unless
// they are a line longer than what one read returned.
Json LinesOf(const std::vector<v1::LogChunk>& chunks, Offsets* offsets, bool flush) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<const v1::LogChunk*, std::string>> data;
  for (const v1::LogChunk& c : chunks) {
    const std::string key = absl::StrCat(c.rank(), ".", c.stream());
    auto [it, fresh] = data.try_emplace(key, &c, "");
    if (fresh) order.push_back(key);
    it->second.second += c.data();
  }
  Json out = Json::array();
  for (const std::string& key : order) {
    const v1::LogChunk* c = data[key].first;
    const std::string& bytes = data[key].second;
    size_t start = 0;
    for (size_t nl; (nl = bytes.find('\n', start)) != std::string::npos; start = nl + 1) {
      out.push_back(Json{{"rank", c->rank()}, {"stream", c->stream()}, {"text", bytes.substr(start, nl - start)}});
    }
    if (start == bytes.size()) continue;
    if (flush || (start == 0 && bytes.size() >= static_cast<size_t>(kDefaultLogBytes))) {
      out.push_back(Json{{"rank", c->rank()}, {"stream", c->stream()}, {"text", bytes.substr(start)}});
    } else {
      (*offsets)[key] -= static_cast<int64_t>(bytes.size() - start);
    }
  }
  return out;
}

std::string Event(const char* name, const Json& data) { return absl::StrCat("event: ", name, "\ndata: ", Dump(data), "\n\n"); }

struct Stream {
  std::string job_id;
  int64_t id = 0;
  uint64_t seq = 0;
  uint64_t version = 0;
  Offsets offsets;
  std::string last_state;
  Clock::time_point last_write = Clock::now();
};

// One round of the event stream: waits up to kPoll for a change, then writes
// new points, log lines and a changed state. Returns false when the client
// is gone.
bool Pump(Coordinator* c, Stream& st, httplib::DataSink& sink) {
  if (!sink.is_writable()) return false;
  st.version = c->WaitForChange(st.version, kPoll);
  auto job = c->Get(st.job_id);
  if (!job.ok()) {
    sink.done();
    return true;
  }
  const bool terminal = store::IsTerminal(job->job().state());
  std::string out;
  for (const v1::MetricPoint& p : c->MetricsAfterSeq(st.id, &st.seq)) out += Event("metrics", PointJson(p));
  auto chunks = c->ReadLogs(st.job_id, -1, &st.offsets, kStreamLogBytes);
  const bool logs_drained = !chunks.ok() || chunks->empty();
  if (chunks.ok()) {
    for (const Json& line : LinesOf(*chunks, &st.offsets, terminal)) out += Event("log", line);
  }
  std::string state = Dump(JobSummary(job->job()));
  if (state != st.last_state) {
    absl::StrAppend(&out, "event: state\ndata: ", state, "\n\n");
    st.last_state = std::move(state);
  }
  if (out.empty() && Clock::now() - st.last_write >= kKeepalive) out = ": keepalive\n\n";
  if (!out.empty()) {
    if (!sink.write(out.data(), out.size())) return false;
    st.last_write = Clock::now();
  }
  if ((terminal && logs_drained) || c->stopping()) sink.done();
  return true;
}

}  // namespace

void ServeLogs(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  auto job = c->Get(id);
  if (!job.ok()) return SendStatus(res, job.status());
  int32_t rank = -1;
  const std::string r = req.get_param_value("rank");
  if (!r.empty() && (!absl::SimpleAtoi(r, &rank) || rank < 0 || rank >= job->job().world_size())) {
    return SendError(res, 400, absl::StrCat("rank: must be empty or in [0, ", job->job().world_size(), ")"));
  }
  int64_t limit = kDefaultLogBytes;
  if (req.has_param("limit") &&
      (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit < 1 || limit > kMaxLogBytes)) {
    return SendError(res, 400, absl::StrCat("limit: must be in [1, ", kMaxLogBytes, "] bytes"));
  }
  Offsets offsets;
  if (!DecodeCursor(req.get_param_value("after"), &offsets)) {
    return SendError(res, 400, "after: not a cursor from a previous call");
  }
  auto chunks = c->ReadLogs(id, rank, &offsets, limit);
  if (!chunks.ok()) return SendStatus(res, chunks.status());
  Json lines = LinesOf(*chunks, &offsets, store::IsTerminal(job->job().state()));
  res.set_content(Dump(Json{{"lines", lines}, {"cursor", EncodeCursor(offsets)}}), kJsonType);
}

void ServeEvents(Coordinator* c, const httplib::Request& req, httplib::Response& res) {
  auto st = std::make_shared<Stream>();
  st->job_id = req.matches[1];
  auto job = c->Get(st->job_id);
  if (!job.ok()) return SendStatus(res, job.status());
  st->id = *ParseJobId(st->job_id);
  // Points already held are skipped unless after_step asks for them.
  int64_t after_step = 0;
  const bool replay = req.has_param("after_step");
  if (replay && !absl::SimpleAtoi(req.get_param_value("after_step"), &after_step)) {
    return SendError(res, 400, "after_step: expected an integer");
  }
  std::vector<v1::MetricPoint> held = c->MetricsAfterSeq(st->id, &st->seq);
  std::string first;
  for (const v1::MetricPoint& p : held) {
    if (replay && p.step() > after_step) first += Event("metrics", PointJson(p));
  }
  // Log lines from log_cursor (a /logs cursor), else from the logs' current end.
  if (req.has_param("log_cursor")) {
    if (!DecodeCursor(req.get_param_value("log_cursor"), &st->offsets)) {
      return SendError(res, 400, "log_cursor: not a cursor from /logs");
    }
  } else if (auto logs = c->store()->Logs(st->id); logs.ok()) {
    for (const store::LogRecord& lr : *logs) {
      struct stat sb;
      if (::stat(lr.path.c_str(), &sb) == 0) st->offsets[absl::StrCat(lr.rank, ".", lr.stream)] = sb.st_size;
    }
  }
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [c, st, first](size_t, httplib::DataSink& sink) mutable {
    if (!first.empty()) {
      if (!sink.write(first.data(), first.size())) return false;
      first.clear();
    }
    return Pump(c, *st, sink);
  });
}

}  // namespace loom::runtime::service::dashboard::internal
