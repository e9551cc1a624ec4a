#include "compiler/import/onnx/model_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace loom::compiler::import::onnx {
namespace {

namespace pio = google::protobuf::io;

absl::StatusOr<::onnx::ModelProto> ParseStream(pio::ZeroCopyInputStream* in, int64_t limit, absl::string_view what) {
  ::onnx::ModelProto m;
  pio::CodedInputStream coded(in);
  coded.SetTotalBytesLimit(static_cast<int>(std::min<int64_t>(limit, INT32_MAX)));
  coded.SetRecursionLimit(64);
  if (!m.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a valid ONNX model (the protobuf message is truncated or malformed)"));
  if (!m.has_graph()) return absl::InvalidArgumentError(absl::StrCat(what, ": the model has no graph"));
  return m;
}

// Value names end up in IR text as %"name": quotes, newlines and NULs cannot.
bool PrintableName(const std::string& s) {
  for (char c : s)
    if (c == '"' || c == '\n' || c == '\r' || c == '\0') return false;
  return true;
}

}  // namespace

absl::StatusOr<::onnx::ModelProto> ReadModelFile(const std::string& path, int64_t max_model_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > max_model_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.st_size, " bytes exceeds the limit of ",
                                                   max_model_bytes, " (store large weights as external data)"));
  }
  pio::FileInputStream in(fd);
  in.SetCloseOnDelete(true);
  return ParseStream(&in, st.st_size, path);
}

absl::StatusOr<::onnx::ModelProto> ParseModelBytes(absl::string_view bytes, int64_t max_model_bytes) {
  if (static_cast<int64_t>(bytes.size()) > max_model_bytes)
    return absl::InvalidArgumentError(absl::StrCat("model: ", bytes.size(), " bytes exceeds the limit of ", max_model_bytes));
  pio::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return ParseStream(&in, static_cast<int64_t>(bytes.size()), "model");
}

absl::StatusOr<int> ModelOpset(const ::onnx::ModelProto& model) {
  int opset = -1;
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = static_cast<int>(std::min<int64_t>(o.version(), INT32_MAX));
  if (opset < 0) return absl::InvalidArgumentError("model: imports no default-domain (ai.onnx) opset");
  if (opset < kMinOpset || opset > kMaxOpset)
    return absl::InvalidArgumentError(absl::StrCat("model: opset ", opset, " is not supported (Loom imports opsets ",
                                                   kMinOpset, " to ", kMaxOpset, ")"));
  return opset;
}

absl::StatusOr<std::vector<int>> CheckGraph(const ::onnx::GraphProto& g, int max_nodes) {
  if (g.node_size() > max_nodes)
    return absl::InvalidArgumentError(absl::StrCat("graph: ", g.node_size(), " nodes exceeds the limit of ", max_nodes));
  std::map<std::string, int> producer;  // value -> node index (-1: graph input or initializer)
  auto define = [&](const std::string& name, int node, absl::string_view what) -> absl::Status {
    if (!PrintableName(name))
      return absl::InvalidArgumentError(absl::StrCat(what, " has a name with a quote, newline or NUL"));
    auto [it, fresh] = producer.emplace(name, node);
    if (!fresh && !(node < 0 && it->second < 0))
      return absl::InvalidArgumentError(absl::StrCat(what, ": value '", name, "' is defined more than once"));
    return absl::OkStatus();
  };
  for (const auto& t : g.initializer()) LOOM_RETURN_IF_ERROR(define(t.name(), -1, absl::StrCat("initializer '", t.name(), "'")));
  for (const auto& in : g.input()) LOOM_RETURN_IF_ERROR(define(in.name(), -1, absl::StrCat("graph input '", in.name(), "'")));
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& out : g.node(i).output())
      if (!out.empty()) LOOM_RETURN_IF_ERROR(define(out, i, NodeDisplay(g.node(i), i, 0)));
  // Kahn's algorithm over node -> node edges.
  std::vector<int> pending(g.node_size(), 0);
  std::vector<std::vector<int>> users(g.node_size());
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input()) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return absl::InvalidArgumentError(absl::StrCat(NodeDisplay(g.node(i), i, 0), ": input '", in,
                                                       "' is not defined (no initializer, graph input or node makes it)"));
      if (it->second >= 0) {
        ++pending[i];
        users[it->second].push_back(i);
      }
    }
  }
  std::vector<int> order, ready;
  for (int i = g.node_size() - 1; i >= 0; --i)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto it = users[i].rbegin(); it != users[i].rend(); ++it)
      if (--pending[*it] == 0) ready.push_back(*it);
  }
  if (static_cast<int>(order.size()) != g.node_size()) {
    for (int i = 0; i < g.node_size(); ++i)
      if (pending[i] > 0)
        return absl::InvalidArgumentError(absl::StrCat("graph: a cycle runs through ", NodeDisplay(g.node(i), i, 0)));
  }
  for (const auto& out : g.output())
    if (!producer.count(out.name()))
      return absl::InvalidArgumentError(absl::StrCat("graph output '", out.name(), "' is not defined"));
  return order;
}

std::set<std::string> UpstreamInputs(const ::onnx::GraphProto& g, const std::string& value,
                                     const std::set<std::string>& initializers) {
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& out : g.node(i).output()) producer[out] = i;
  std::set<std::string> graph_inputs, seen, found;
  for (const auto& in : g.input())
    if (!initializers.count(in.name())) graph_inputs.insert(in.name());
  std::vector<std::string> stack = {value};
  while (!stack.empty()) {
    std::string v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    if (graph_inputs.count(v)) found.insert(v);
    auto it = producer.find(v);
    if (it == producer.end()) continue;
    for (const auto& in : g.node(it->second).input())
      if (!in.empty()) stack.push_back(in);
  }
  return found;
}

std::string NodeDisplay(const ::onnx::NodeProto& n, int index, int opset) {
  const std::string os = opset > 0 ? absl::StrCat(", opset ", opset) : "";
  if (!n.name().empty()) return absl::StrCat("node '", n.name(), "' (", n.op_type(), os, ")");
  return absl::StrCat("node #", index, " (", n.op_type(), os, ")");
}

}  // namespace loom::compiler::import::onnx
